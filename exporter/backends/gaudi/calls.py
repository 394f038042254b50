"""pyhlml's side of the vendor call wrapper (exporter/backends/calls.py): how its errors scope.

- NOT_SUPPORTED, INVALID_ARGUMENT (what pyhlml raises when the installed
  libhlml lacks the function), or a function this pyhlml release lacks:
  permanent, the value is absent and the call is not made again for that device.
- AIP_IS_LOST / DRIVER_NOT_LOADED / UNINITIALIZED / UNKNOWN: the device stopped
  answering; it is down for this cycle (`DeviceDown`).
- Anything else (TIMEOUT, NO_DATA, MEMORY, NOT_FOUND, ...): absent for this cycle.
- A failure of pyhlml's Python layer (a ctypes conversion, say): permanent, of
  kind ``wrapper_<type>``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..calls import FUNCTION_NOT_FOUND, DeviceDown, ErrorTally, Failure, ModuleCalls, number, text
from .status import HLML_RETURN, status_kind

__all__ = ["BACKEND_NAME", "FUNCTION_NOT_FOUND", "DeviceCalls", "DeviceDown", "error_kind",
           "number", "text"]

BACKEND_NAME = "gaudi"

_PERMANENT = frozenset(HLML_RETURN[n] for n in ("NOT_SUPPORTED", "INVALID_ARGUMENT"))
_DEVICE_DOWN = frozenset(HLML_RETURN[n] for n in (
    "AIP_IS_LOST", "DRIVER_NOT_LOADED", "UNINITIALIZED", "UNKNOWN"))


def error_kind(error: BaseException) -> str:
    """The kind of an HLMLError: ``not_supported``, ``aip_is_lost``, ..."""
    return status_kind(getattr(error, "value", None))


class DeviceCalls(ModuleCalls):
    """pyhlml calls for one device, remembering which functions it does not support.

    Instances live as long as the device; `begin_cycle()` clears the previous
    cycle's errors. One thread at a time uses one.
    """

    def __init__(self, library: ModuleType, tally: ErrorTally) -> None:
        super().__init__(library, tally)
        self.vendor_error = library.HLMLError

    def error_code(self, error: BaseException) -> Any:
        return getattr(error, "value", None)

    def failure(self, error: BaseException) -> Failure:
        code = self.error_code(error)
        return Failure(error_kind(error), permanent=code in _PERMANENT,
                       device_down=code in _DEVICE_DOWN)
