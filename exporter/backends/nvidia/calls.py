"""Every NVML call goes through here once: errors are classified and scoped.

- NotSupported / NoPermission / FunctionNotFound: the value is absent; the call
  is not made again for that device (the answer will not change).
- GpuIsLost / Unknown: the whole device is down for this cycle (`DeviceDown`).
- Anything else: the value is absent for this cycle only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from ..base import ErrorTally

T = TypeVar("T")

BACKEND_NAME = "nvidia"

_PERMANENT = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
})
_DEVICE_DOWN = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN})
_ERROR_KINDS = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_").lower()
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_")
}


def error_kind(error: pynvml.NVMLError) -> str:
    """A short, stable name for an NVML error: `not_supported`, `gpu_is_lost`, ..."""
    return _ERROR_KINDS.get(error.value, f"code_{error.value}")


class DeviceDown(Exception):
    """The device answered GpuIsLost or Unknown: nothing more can be read this cycle."""

    def __init__(self, function: str, kind: str) -> None:
        super().__init__(f"{function}: {kind}")
        self.function = function
        self.kind = kind


class DeviceCalls:
    """NVML calls for one device, remembering which functions it does not support.

    Instances live as long as the device; `begin_cycle()` clears the errors of
    the previous cycle. One thread at a time uses an instance.
    """

    def __init__(self, tally: ErrorTally) -> None:
        self._tally = tally
        self._unsupported: dict[str, str] = {}
        self.cycle_errors: dict[str, str] = {}

    def begin_cycle(self) -> None:
        """Start a new sampling cycle with no errors recorded."""
        self.cycle_errors = {}

    @property
    def unsupported(self) -> dict[str, str]:
        """Functions this device never answers, with the reason."""
        return dict(self._unsupported)

    def call(
        self,
        fn: Callable[..., T],
        *args: Any,
        key: str = "",
        empty_on: frozenset[int] = frozenset(),
        empty: Any = None,
    ) -> T | None:
        """Call `fn(*args)`; return its result, or None when the value is absent.

        `key` distinguishes calls of one function with different arguments in
        the unsupported-function memory. Codes in `empty_on` are normal answers
        meaning "nothing to report" (e.g. NotFound from process utilization on
        an idle GPU) and return `empty` without counting an error.
        """
        name = fn.__name__ + (f"[{key}]" if key else "")
        if name in self._unsupported:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError as error:
            if error.value in empty_on:
                return empty
            kind = error_kind(error)
            self._tally.count(kind, fn.__name__)
            if error.value in _DEVICE_DOWN:
                raise DeviceDown(name, kind) from None
            if error.value in _PERMANENT:
                self._unsupported[name] = kind
            self.cycle_errors[name] = kind
            return None

    def first_of(self, *calls: tuple[Callable[..., Any], tuple[Any, ...]]) -> Any | None:
        """The first call in `calls` that answers; for functions renamed across drivers."""
        for fn, args in calls:
            value = self.call(fn, *args)
            if value is not None:
                return value
        return None
