"""amdsmi's side of the vendor call wrapper (exporter/backends/calls.py): how its errors scope.

- NOT_SUPPORTED / NOT_YET_IMPLEMENTED / NO_PERM / FAIL_LOAD_SYMBOL, or a function
  this amdsmi release lacks: permanent, the value is absent and the call is not
  made again for that device.
- NOT_FOUND / DRIVER_NOT_LOADED / NOT_INIT / AMDGPU_RESTART_ERR / UNKNOWN_ERROR:
  the device stopped answering; it is down for this cycle (`DeviceDown`).
- An exception without a status (amdsmi refused our argument): permanent.
- Anything else (TIMEOUT, RETRY, BUSY, I/O errors, ...): absent for this cycle only.
- A failure of amdsmi's Python layer itself (a value it cannot decode): permanent,
  of kind ``wrapper_<type>``; the device keeps reporting.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..calls import FUNCTION_NOT_FOUND, DeviceDown, ErrorTally, Failure, ModuleCalls, number
from .status import AMDSMI_STATUS, status_kind

__all__ = ["BACKEND_NAME", "FUNCTION_NOT_FOUND", "DeviceCalls", "DeviceDown", "error_kind",
           "field", "number"]

BACKEND_NAME = "amd"

_PERMANENT = frozenset(AMDSMI_STATUS[name] for name in (
    "NOT_SUPPORTED", "NOT_YET_IMPLEMENTED", "NO_PERM", "FAIL_LOAD_SYMBOL"))
_DEVICE_DOWN = frozenset(AMDSMI_STATUS[name] for name in (
    "NOT_FOUND", "DRIVER_NOT_LOADED", "NOT_INIT", "AMDGPU_RESTART_ERR", "UNKNOWN_ERROR"))


def error_kind(error: BaseException) -> str:
    """The kind of an amdsmi exception: its status name, or ``parameter`` for a bad argument."""
    return status_kind(getattr(error, "err_code", None))


class DeviceCalls(ModuleCalls):
    """amdsmi calls for one device, remembering which functions it does not support.

    Instances live as long as the device; `begin_cycle()` clears the errors and
    the memoised answers of the previous cycle. One thread at a time uses one.
    """

    def __init__(self, library: ModuleType, tally: ErrorTally) -> None:
        super().__init__(library, tally)
        self.vendor_error = library.AmdSmiException
        self._answers: dict[tuple[str, str], Any] = {}

    def error_code(self, error: BaseException) -> Any:
        return getattr(error, "err_code", None)

    def failure(self, error: BaseException) -> Failure:
        code = self.error_code(error)
        return Failure(error_kind(error), permanent=code in _PERMANENT or code is None,
                       device_down=code in _DEVICE_DOWN)

    def begin_cycle(self) -> None:
        """Start a new sampling cycle with no errors recorded and nothing memoised."""
        super().begin_cycle()
        self._answers = {}

    def once(self, function: str, *args: Any, key: str = "") -> Any | None:
        """`call`, answered at most once per cycle (for calls several probes read)."""
        memo = (function, key)
        if memo not in self._answers:
            self._answers[memo] = self.call(function, *args, key=key)
        return self._answers[memo]


def field(answer: Mapping[str, Any] | None, *keys: str) -> float | None:
    """The first numeric value among `keys` of an amdsmi answer dict."""
    if answer is None:
        return None
    for key in keys:
        value = number(answer.get(key))
        if value is not None:
            return value
    return None
