"""The simulated driver's nvmlEventSetWait sleeps like a real one, yet sees every change.

It sleeps until the earliest of: its timeout, the next scheduled XID of a registered
device, a change of the state file (written by another process or thread), the set being
freed, a device registered, NVML shut down. Each test waits with a timeout far longer than
it runs, so a wait that missed the change would fail with Timeout, not pass late.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from ray_accel.exporter.simulate import SimulatedHardware

LONG_MS = 60_000  # far beyond each test: the wait must end for its reason, not at the timeout


def _gpu(i: int, **keys: Any) -> dict[str, Any]:
    return {"name": "NVIDIA Test GPU", "uuid": f"GPU-00000000-0000-4000-8000-{i:012x}",
            "pci_bus_id": f"00000000:{0x10 + i:02X}:00.0", **keys}


def _registered(handles: list, indexes: tuple[int, ...]) -> Any:
    events = pynvml.nvmlEventSetCreate()
    for i in indexes:
        pynvml.nvmlDeviceRegisterEvents(handles[i], pynvml.nvmlEventTypeXidCriticalError, events)
    return events


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list]:
    """Run `call` on a thread; its result or NVMLError lands in the returned list."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(call())
        except pynvml.NVMLError as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _waiting(thread: threading.Thread) -> None:
    """Give the thread time to enter the wait (it is still inside it afterwards)."""
    thread.join(0.2)
    assert thread.is_alive()


def test_a_scheduled_xid_ends_a_long_wait(nvml: Callable[..., SimulatedHardware]) -> None:
    hw = nvml({"devices": [_gpu(0), _gpu(1)]})
    due = hw.elapsed_s() + 0.3
    hw.modify(lambda doc: doc["devices"][1].update(xid_events=[{"at_s": due, "xid": 48}]))
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    events = _registered(handles, (0, 1))
    data = pynvml.nvmlEventSetWait(events, LONG_MS)
    assert (data.eventData, pynvml.nvmlDeviceGetIndex(data.device)) == (48, 1)
    assert hw.elapsed_s() >= due  # delivered when due, not before
    pynvml.nvmlEventSetFree(events)


def test_a_state_file_written_during_a_wait_is_seen(nvml: Callable[..., SimulatedHardware]
                                                    ) -> None:
    # A frozen clock: no event can become due by time alone, only through the new file.
    hw = nvml({"freeze_at_s": 10, "devices": [_gpu(0)]})
    events = _registered([pynvml.nvmlDeviceGetHandleByIndex(0)], (0,))
    waiter, outcome = _in_thread(lambda: pynvml.nvmlEventSetWait(events, LONG_MS))
    _waiting(waiter)
    hw.modify(lambda doc: doc["devices"][0].update(xid_events=[{"at_s": 5, "xid": 79}]))
    waiter.join(30)
    assert not waiter.is_alive()
    assert outcome[0].eventData == 79
    pynvml.nvmlEventSetFree(events)


def test_a_device_registered_during_a_wait_delivers_its_due_event(
        nvml: Callable[..., SimulatedHardware]) -> None:
    nvml({"freeze_at_s": 10, "devices": [_gpu(0), _gpu(1, xid_events=[{"at_s": 1, "xid": 31}])]})
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    events = _registered(handles, (0,))
    waiter, outcome = _in_thread(lambda: pynvml.nvmlEventSetWait(events, LONG_MS))
    _waiting(waiter)
    pynvml.nvmlDeviceRegisterEvents(handles[1], pynvml.nvmlEventTypeXidCriticalError, events)
    waiter.join(30)
    assert not waiter.is_alive()
    assert outcome[0].eventData == 31
    pynvml.nvmlEventSetFree(events)


@pytest.mark.parametrize("end", ["free", "shutdown"])
def test_freeing_the_set_or_shutting_down_ends_a_wait(nvml: Callable[..., SimulatedHardware],
                                                       end: str) -> None:
    nvml({"freeze_at_s": 10, "devices": [_gpu(0)]})
    events = _registered([pynvml.nvmlDeviceGetHandleByIndex(0)], (0,))
    waiter, outcome = _in_thread(lambda: pynvml.nvmlEventSetWait(events, LONG_MS))
    _waiting(waiter)
    if end == "free":
        pynvml.nvmlEventSetFree(events)
    else:
        pynvml.nvmlShutdown()
    waiter.join(30)
    assert not waiter.is_alive()
    expected = (pynvml.NVMLError_InvalidArgument if end == "free"
                else pynvml.NVMLError_Uninitialized)
    assert isinstance(outcome[0], expected)
    if end == "shutdown":
        pynvml.nvmlInit()  # for the fixture's shutdown
        pynvml.nvmlEventSetFree(events)
