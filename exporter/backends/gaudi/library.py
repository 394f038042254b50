"""Importing ``pyhlml`` (PyPI: habana-pyhlml) and starting HLML, with one-line reasons on failure.

Importing pyhlml loads no library (and warns that its ``hlml_types`` module is
deprecated); ``hlmlInit`` loads /usr/lib/habanalabs/libhlml.so and, when it
cannot, prints "Failed to load libhlml" and raises HLML_ERROR_UNINITIALIZED.
Any failure makes the backend unavailable with a message saying what is
missing; what pyhlml prints is folded into it rather than printed.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from types import ModuleType

from ..amd.library import _one_line, _output_of_this_thread
from ..base import BackendUnavailable
from .status import HLML_RETURN, status_kind

MODULE = "pyhlml"
_LOCK = threading.Lock()
_INIT_REASONS = {
    HLML_RETURN["UNINITIALIZED"]: ("libhlml.so could not be loaded (/usr/lib/habanalabs/); "
                                   "install the Intel Gaudi driver and software stack"),
    HLML_RETURN["DRIVER_NOT_LOADED"]: "the habanalabs driver is not loaded",
}


def _with_output(reason: str, printed: str) -> str:
    return f"{reason} [pyhlml printed: {printed}]" if printed else reason


def load_pyhlml() -> ModuleType:
    """Import ``pyhlml``; raise BackendUnavailable saying why it cannot be used."""
    with _LOCK, _output_of_this_thread() as outputs, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pyhlml.hlml_types, on import
        try:
            return importlib.import_module(MODULE)
        except ImportError as error:
            reason = (f"the pyhlml package is not installed ({_one_line(str(error))}); on "
                      "Intel Gaudi nodes pip install habana-pyhlml")
        except Exception as error:  # the package's import runs arbitrary code
            reason = (f"pyhlml could not be imported: {type(error).__name__}: "
                      f"{_one_line(str(error))}")
    printed = _one_line("".join(text for output in outputs for text in output.kept))
    raise BackendUnavailable(_with_output(reason, printed))


def start_hlml(library: ModuleType) -> None:
    """``hlmlInit``; raise BackendUnavailable saying why HLML cannot be used."""
    with _LOCK, _output_of_this_thread() as outputs:
        try:
            library.hlmlInit()
            return
        except library.HLMLError as error:
            code = getattr(error, "value", None)
            reason = _INIT_REASONS.get(code, f"hlmlInit failed: {status_kind(code)}")
        except Exception as error:  # e.g. a pyhlml built for another libhlml
            reason = f"hlmlInit failed: {type(error).__name__}: {_one_line(str(error))}"
    printed = _one_line("".join(text for output in outputs for text in output.kept))
    raise BackendUnavailable(_with_output(reason, printed))
