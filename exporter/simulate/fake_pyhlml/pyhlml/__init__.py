"""A simulated ``pyhlml`` (PyPI: habana-pyhlml): the real module's names, driven by a scenario.

`SimulatedHardware` puts the folder above this package first on ``sys.path``
(and on PYTHONPATH for child processes) when a scenario has a ``gaudi``
section, so that ``import pyhlml`` finds this instead of the real binding.
Like the real one, importing it loads no library: ``hlmlInit`` does, and fails
with HLML_ERROR_UNINITIALIZED (after printing "Failed to load libhlml") when
there is no simulated Gaudi machine. ``gaudi.import_error`` makes the import
itself fail, as on a machine without the package.
"""

from ._simulation import import_failure as _import_failure

SIMULATED = True

if _import_failure() == "ImportError":
    raise ModuleNotFoundError("No module named 'pyhlml'", name="pyhlml")

from .main import *  # noqa: E402,F403 - the real package's layout
