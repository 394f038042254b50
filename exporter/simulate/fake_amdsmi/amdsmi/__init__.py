"""A simulated ``amdsmi`` package: the real module's names, driven by a scenario.

`SimulatedHardware.activate()` puts the folder above this package first on
``sys.path`` (and `environ()` on PYTHONPATH for child processes), so that
``import amdsmi`` finds this instead of the PyPI wheel. A scenario can make
the import itself fail the ways the real wheel does (``amdsmi_import_error``):
KeyError without ROCm's libamd_smi.so, AttributeError when the wheel is newer
than the library, ImportError when the package is absent.
"""

from ._simulation import import_failure as _import_failure

_failure = _import_failure()
if _failure == "KeyError":
    # what amdsmi_wrapper prints, then fails with, when libamd_smi.so is not found
    print("Unable to find libamd_smi.so library try installing amd-smi-lib from your "
          "package manager")
    raise KeyError("libamd_smi.so")
if _failure == "AttributeError":
    raise AttributeError("/opt/rocm/lib/libamd_smi.so: undefined symbol: "
                         "amdsmi_get_gpu_enumeration_info")
if _failure == "ImportError":
    raise ModuleNotFoundError("No module named 'amdsmi'", name="amdsmi")

from . import amdsmi_interface, amdsmi_wrapper  # noqa: E402
from .amdsmi_exception import (  # noqa: E402
    AmdSmiBdfFormatException,
    AmdSmiException,
    AmdSmiKeyException,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiRetryException,
    AmdSmiTimeoutException,
)
from .amdsmi_interface import *  # noqa: E402, F403  (as the real package does)

__version__ = "7.0.2"
SIMULATED = True  # not in the real package: lets tests tell the fake apart

__all__ = [
    "SIMULATED",
    "AmdSmiBdfFormatException",
    "AmdSmiException",
    "AmdSmiKeyException",
    "AmdSmiLibraryException",
    "AmdSmiParameterException",
    "AmdSmiRetryException",
    "AmdSmiTimeoutException",
    "amdsmi_wrapper",
    *amdsmi_interface.__all__,
]
