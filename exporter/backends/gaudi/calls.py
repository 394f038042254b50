"""Every pyhlml call goes through here once: errors are classified and scoped.

- NOT_SUPPORTED, INVALID_ARGUMENT (what pyhlml raises when the installed
  libhlml lacks the function), or a function this pyhlml release lacks: the
  value is absent; the call is not made again for that device.
- AIP_IS_LOST / DRIVER_NOT_LOADED / UNINITIALIZED / UNKNOWN: the device stopped
  answering; it is down for this cycle (`DeviceDown`).
- Anything else (TIMEOUT, NO_DATA, MEMORY, NOT_FOUND, ...): absent for this cycle.
- A failure of pyhlml's Python layer (a ctypes conversion, say): absent, not asked again.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..base import CallErrors, DeviceDown, ErrorTally
from .status import HLML_RETURN, status_kind

BACKEND_NAME = "gaudi"
FUNCTION_NOT_FOUND = "function_not_found"

_PERMANENT = frozenset(HLML_RETURN[n] for n in ("NOT_SUPPORTED", "INVALID_ARGUMENT"))
_DEVICE_DOWN = frozenset(HLML_RETURN[n] for n in (
    "AIP_IS_LOST", "DRIVER_NOT_LOADED", "UNINITIALIZED", "UNKNOWN"))


def error_kind(error: BaseException) -> str:
    """The kind of an HLMLError: ``not_supported``, ``aip_is_lost``, ..."""
    return status_kind(getattr(error, "value", None))


class DeviceCalls(CallErrors):
    """pyhlml calls for one device, remembering which functions it does not support.

    Instances live as long as the device; `begin_cycle()` clears the previous
    cycle's errors. One thread at a time uses one.
    """

    def __init__(self, library: ModuleType, tally: ErrorTally) -> None:
        self.library = library
        super().__init__(tally)

    def call(self, function: str, *args: Any, key: str = "") -> Any | None:
        """Call ``pyhlml.<function>(*args)``; return its answer, or None when it is absent.

        `key` distinguishes calls of one function with different arguments
        (the temperature sensor, the clock, the NIC port) in the memory of
        unsupported functions.
        """
        name = function + (f"[{key}]" if key else "")
        if name in self._unsupported:
            return None
        fn = getattr(self.library, function, None)
        if fn is None:
            self._unsupported[name] = FUNCTION_NOT_FOUND
            self._tally.count(FUNCTION_NOT_FOUND, function)
            return None
        try:
            return fn(*args)
        except self.library.HLMLError as error:
            kind = error_kind(error)
            code = getattr(error, "value", None)
            self._tally.count(kind, function)
            if code in _DEVICE_DOWN:
                raise DeviceDown(name, kind) from None
            if code in _PERMANENT:
                self._unsupported[name] = kind
            self.cycle_errors[name] = kind
            return None
        except Exception as error:  # the binding's Python code
            kind = f"wrapper_{type(error).__name__.lower()}"
            self._tally.count(kind, function)
            self._unsupported[name] = kind
            self.cycle_errors[name] = kind
            return None


def text(value: Any) -> str:
    """A pyhlml string answer (bytes) as text; "" when absent."""
    if isinstance(value, bytes):
        return value.decode(errors="replace").strip("\0 ")
    return "" if value is None else str(value)


def number(value: Any) -> float | None:
    """A numeric pyhlml answer, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
