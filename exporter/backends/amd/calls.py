"""Every amdsmi call goes through here once: errors are classified and scoped.

- NOT_SUPPORTED / NOT_YET_IMPLEMENTED / NO_PERM, or a function this amdsmi
  release lacks: the value is absent; the call is not made again for that
  device (the answer will not change).
- NOT_FOUND / DRIVER_NOT_LOADED / NOT_INIT / AMDGPU_RESTART_ERR / UNKNOWN_ERROR:
  the device stopped answering; it is down for this cycle (`DeviceDown`).
- Anything else (TIMEOUT, RETRY, BUSY, I/O errors, ...): absent for this cycle only.
- A failure of amdsmi's Python layer itself (a bad argument, a value it cannot
  decode): the value is absent and not asked again; the device keeps reporting.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..base import CallErrors, DeviceDown, ErrorTally
from .status import AMDSMI_STATUS, status_kind

BACKEND_NAME = "amd"
FUNCTION_NOT_FOUND = "function_not_found"

_PERMANENT = frozenset(AMDSMI_STATUS[name] for name in (
    "NOT_SUPPORTED", "NOT_YET_IMPLEMENTED", "NO_PERM", "FAIL_LOAD_SYMBOL"))
_DEVICE_DOWN = frozenset(AMDSMI_STATUS[name] for name in (
    "NOT_FOUND", "DRIVER_NOT_LOADED", "NOT_INIT", "AMDGPU_RESTART_ERR", "UNKNOWN_ERROR"))


def error_kind(error: BaseException) -> str:
    """The kind of an amdsmi exception: its status name, or ``parameter`` for a bad argument."""
    return status_kind(getattr(error, "err_code", None))


class DeviceCalls(CallErrors):
    """amdsmi calls for one device, remembering which functions it does not support.

    Instances live as long as the device; `begin_cycle()` clears the errors and
    the memoised answers of the previous cycle. One thread at a time uses one.
    """

    def __init__(self, library: ModuleType, tally: ErrorTally) -> None:
        self.library = library
        super().__init__(tally)
        self._answers: dict[tuple[str, str], Any] = {}

    def begin_cycle(self) -> None:
        """Start a new sampling cycle with no errors recorded and nothing memoised."""
        super().begin_cycle()
        self._answers = {}

    def call(self, function: str, *args: Any, key: str = "") -> Any | None:
        """Call ``amdsmi.<function>(*args)``; return its answer, or None when it is absent.

        `key` distinguishes calls of one function with different arguments
        (e.g. the temperature sensor) in the unsupported-function memory.
        """
        name = function + (f"[{key}]" if key else "")
        if name in self._unsupported:
            return None
        fn = getattr(self.library, function, None)
        if fn is None:  # an older amdsmi release without this function
            self._unsupported[name] = FUNCTION_NOT_FOUND
            self._tally.count(FUNCTION_NOT_FOUND, function)
            return None
        try:
            return fn(*args)
        except self.library.AmdSmiException as error:
            kind = error_kind(error)
            code = getattr(error, "err_code", None)
            self._tally.count(kind, function)
            if code in _DEVICE_DOWN:
                raise DeviceDown(name, kind) from None
            if code in _PERMANENT or code is None:  # None: our argument was refused
                self._unsupported[name] = kind
            self.cycle_errors[name] = kind
            return None
        except Exception as error:  # the binding's Python code, e.g. an enum it cannot map
            kind = f"wrapper_{type(error).__name__.lower()}"
            self._tally.count(kind, function)
            self._unsupported[name] = kind
            return None

    def once(self, function: str, *args: Any, key: str = "") -> Any | None:
        """`call`, answered at most once per cycle (for calls several probes read)."""
        memo = (function, key)
        if memo not in self._answers:
            self._answers[memo] = self.call(function, *args, key=key)
        return self._answers[memo]


def number(value: Any) -> float | None:
    """A numeric amdsmi value, or None for "N/A" (and other non-numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def field(answer: Mapping[str, Any] | None, *keys: str) -> float | None:
    """The first numeric value among `keys` of an amdsmi answer dict."""
    if answer is None:
        return None
    for key in keys:
        value = number(answer.get(key))
        if value is not None:
            return value
    return None
