"""The one vendor call wrapper scopes a failure the same way for NVIDIA, AMD and Gaudi.

Each vendor's `DeviceCalls` only maps its library's exceptions to a kind and to
permanent / device down; what follows (the tally, `DeviceDown`, the memory of
unsupported calls, the cycle's errors) is the shared wrapper's. NVIDIA's errors
are the real binding's (`pynvml.NVMLError`); AMD's and Gaudi's are raised the way
their bindings raise them (a status in `err_code` / `value`).
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml
import pytest

from ray_accel.exporter.backends.amd import calls as amd_calls
from ray_accel.exporter.backends.amd.status import AMDSMI_STATUS
from ray_accel.exporter.backends.base import DeviceDown
from ray_accel.exporter.backends.calls import ErrorTally, VendorCalls
from ray_accel.exporter.backends.gaudi import calls as gaudi_calls
from ray_accel.exporter.backends.gaudi.status import HLML_RETURN
from ray_accel.exporter.backends.nvidia import calls as nvidia_calls


class AmdSmiException(Exception):
    """As amdsmi raises it: the library's status in `err_code`."""

    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = err_code


class HLMLError(Exception):
    """As pyhlml raises it: the library's status in `value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class Vendor:
    """How one vendor's wrapper is made and called, and which statuses mean what."""

    name: str
    make: Callable[[ErrorTally], Any]
    error: Callable[[int], Exception]
    permanent: tuple[int, str]  # (status, kind)
    device_down: tuple[int, str]
    transient: tuple[int, str]
    missing_kind: str = "function_not_found"

    def call(self, calls: Any, function: str, fn: Callable[..., Any], *args: Any,
             key: str = "") -> Any:
        """Calls `fn` as the vendor library's function `function`."""
        fn.__name__ = function
        if self.name == "nvidia":
            return calls.call(fn, *args, key=key)
        setattr(calls.library, function, fn)
        return calls.call(function, *args, key=key)

    def call_missing(self, calls: Any, function: str) -> Any:
        """Calls a function this release of the library lacks."""
        if self.name == "nvidia":  # the binding raises FunctionNotFound for a missing symbol
            def absent() -> None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            absent.__name__ = function
            return calls.call(absent)
        return calls.call(function)


def _amd(tally: ErrorTally) -> Any:
    library = types.ModuleType("amdsmi")
    library.AmdSmiException = AmdSmiException
    return amd_calls.DeviceCalls(library, tally)


def _gaudi(tally: ErrorTally) -> Any:
    library = types.ModuleType("pyhlml")
    library.HLMLError = HLMLError
    return gaudi_calls.DeviceCalls(library, tally)


VENDORS = [
    Vendor("nvidia", lambda tally: nvidia_calls.DeviceCalls(tally, slow_call_cpu_s=1e9),
           pynvml.NVMLError,
           permanent=(pynvml.NVML_ERROR_NOT_SUPPORTED, "not_supported"),
           device_down=(pynvml.NVML_ERROR_GPU_IS_LOST, "gpu_is_lost"),
           transient=(pynvml.NVML_ERROR_TIMEOUT, "timeout")),
    Vendor("amd", _amd, AmdSmiException,
           permanent=(AMDSMI_STATUS["NOT_SUPPORTED"], "not_supported"),
           device_down=(AMDSMI_STATUS["NOT_FOUND"], "not_found"),
           transient=(AMDSMI_STATUS["BUSY"], "busy")),
    Vendor("gaudi", _gaudi, HLMLError,
           permanent=(HLML_RETURN["NOT_SUPPORTED"], "not_supported"),
           device_down=(HLML_RETURN["AIP_IS_LOST"], "aip_is_lost"),
           transient=(HLML_RETURN["TIMEOUT"], "timeout")),
]


@pytest.fixture(params=VENDORS, ids=lambda v: v.name)
def vendor(request) -> Vendor:
    return request.param


class Counted:
    """A vendor function that raises `error` (or answers `answer`), counting its calls."""

    def __init__(self, error: BaseException | None = None, answer: Any = None) -> None:
        self.error, self.answer, self.calls = error, answer, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.answer


def test_every_vendor_uses_the_one_wrapper(vendor):
    assert isinstance(vendor.make(ErrorTally()), VendorCalls)


def test_an_answer_passes_through_and_counts_nothing(vendor):
    tally = ErrorTally()
    calls = vendor.make(tally)
    fn = Counted(answer=42)
    assert vendor.call(calls, "getPower", fn, "handle") == 42
    assert fn.calls == 1
    assert tally.snapshot() == {} and calls.cycle_errors == {} and calls.unsupported == {}


def test_a_permanent_failure_is_absent_remembered_and_in_the_cycles_errors(vendor):
    tally = ErrorTally()
    calls = vendor.make(tally)
    status, kind = vendor.permanent
    fn = Counted(vendor.error(status))
    assert vendor.call(calls, "getTemperature", fn, key="edge") is None
    assert tally.snapshot() == {(kind, "getTemperature"): 1}
    assert calls.unsupported == {"getTemperature[edge]": kind}
    assert calls.cycle_errors == {"getTemperature[edge]": kind}
    calls.begin_cycle()
    assert vendor.call(calls, "getTemperature", fn, key="edge") is None
    assert fn.calls == 1  # never asked again
    assert tally.snapshot() == {(kind, "getTemperature"): 1}
    assert calls.cycle_errors == {} and calls.unsupported == {"getTemperature[edge]": kind}
    other = Counted(answer=30)  # another key of the same function is still asked
    assert vendor.call(calls, "getTemperature", other, key="hotspot") == 30


def test_a_transient_failure_is_absent_this_cycle_only(vendor):
    tally = ErrorTally()
    calls = vendor.make(tally)
    status, kind = vendor.transient
    fn = Counted(vendor.error(status))
    assert vendor.call(calls, "getClock", fn) is None
    assert calls.cycle_errors == {"getClock": kind} and calls.unsupported == {}
    calls.begin_cycle()
    assert calls.cycle_errors == {}
    fn.error, fn.answer = None, 1980
    assert vendor.call(calls, "getClock", fn) == 1980
    assert fn.calls == 2
    assert tally.snapshot() == {(kind, "getClock"): 1}


def test_a_device_down_failure_raises_device_down_named_with_its_key(vendor):
    tally = ErrorTally()
    calls = vendor.make(tally)
    status, kind = vendor.device_down
    with pytest.raises(DeviceDown) as raised:
        vendor.call(calls, "getEccCount", Counted(vendor.error(status)), key="sram")
    assert (raised.value.function, raised.value.kind) == ("getEccCount[sram]", kind)
    assert raised.value.__suppress_context__
    assert tally.snapshot() == {(kind, "getEccCount"): 1}
    assert calls.unsupported == {}


def test_the_bindings_own_failure_is_permanent_and_in_the_cycles_errors(vendor):
    """A failure of the binding's Python code (not the library's status) costs that value only,
    and for good; every vendor names it in the cycle's errors (AMD's copy used not to)."""
    tally = ErrorTally()
    calls = vendor.make(tally)
    fn = Counted(ValueError("cannot map enum 7"))
    assert vendor.call(calls, "getPartition", fn) is None
    kind = "wrapper_valueerror"
    assert tally.snapshot() == {(kind, "getPartition"): 1}
    assert calls.unsupported == {"getPartition": kind}
    assert calls.cycle_errors == {"getPartition": kind}
    assert vendor.call(calls, "getPartition", fn) is None
    assert fn.calls == 1


def test_a_function_the_library_lacks_is_permanent_with_one_kind_for_every_vendor(vendor):
    tally = ErrorTally()
    calls = vendor.make(tally)
    assert vendor.call_missing(calls, "getNewThing") is None
    assert tally.snapshot() == {(vendor.missing_kind, "getNewThing"): 1}
    assert calls.unsupported == {"getNewThing": vendor.missing_kind}
    assert calls.cycle_errors == {"getNewThing": vendor.missing_kind}
    vendor.call_missing(calls, "getNewThing")  # not asked again
    assert tally.snapshot() == {(vendor.missing_kind, "getNewThing"): 1}


def test_nvidia_reuses_a_slow_answer_and_amd_and_gaudi_do_not():
    """Slow-call reuse is the wrapper's, turned on for NVIDIA only (its driver's costly calls)."""
    now = [0.0]
    nvidia = nvidia_calls.DeviceCalls(ErrorTally(), slow_call_cpu_s=0.0, slow_reuse_s=10.0,
                                      clock=lambda: now[0])
    answers = iter(range(100))

    def nvmlSlow() -> int:
        deadline = time.thread_time() + 0.001
        while time.thread_time() < deadline:
            pass
        return next(answers)

    assert [nvidia.call(nvmlSlow) for _ in range(3)] == [0, 1, 1]  # slow twice: reused
    assert nvidia.reused == ["nvmlSlow"]
    now[0] = 11.0
    assert nvidia.call(nvmlSlow) == 2  # read again once the reuse is over
    for make in (_amd, _gaudi):
        calls = make(ErrorTally())
        calls.library.slow = nvmlSlow
        first, second, third = (calls.call("slow") for _ in range(3))
        assert first < second < third
        assert calls.reused == []
