"""The small interface every vendor backend implements."""

from __future__ import annotations

import abc
import glob
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

from ..model import Device, DeviceSample, Link, ProcessSample, Reading
from .calls import CallErrors, DeviceDown, ErrorTally

__all__ = [  # the call wrapper's names are imported from here too
    "Backend", "BackendAbsent", "BackendUnavailable", "CallErrors", "DeviceChanged",
    "DeviceDown", "DeviceReads", "ErrorTally", "HandleBackend", "HandleDevice", "Undiscovered",
    "open_in_turn", "read_timed", "sample_through_handle", "unavailable",
]

T = TypeVar("T")


class BackendUnavailable(RuntimeError):
    """The vendor library or driver cannot be used; the backend is reported down."""


class BackendAbsent(BackendUnavailable):
    """Neither the vendor's library nor its devices are on this host: nothing is wrong.

    The backend is still retried (a driver may be installed later), but an agent
    whose backends are absent is not degraded.
    """


# A folder standing for /dev where device files are looked for (simulated hardware sets it).
DEV_DIR_ENV = "RAY_ACCEL_DEV_DIR"


def unavailable(message: str, device_nodes: Sequence[str]) -> BackendUnavailable:
    """`BackendAbsent(message)` when no file matches `device_nodes` (glob patterns such as
    "/dev/nvidia[0-9]*"), else `BackendUnavailable(message)`: a library that cannot be used
    on a host that has the devices is a fault.
    """
    root = os.environ.get(DEV_DIR_ENV)
    patterns = [root + p.removeprefix("/dev") if root and p.startswith("/dev/") else p
                for p in device_nodes]
    if any(glob.glob(pattern) for pattern in patterns):
        return BackendUnavailable(message)
    return BackendAbsent(message)


@dataclass(frozen=True, slots=True)
class Undiscovered:
    """A device the vendor library counts but that `Backend.discover` has still to identify.

    `placeholder` stands for it (by index, model "unknown") until it is identified.
    """

    placeholder: Device


class DeviceChanged(DeviceDown):
    """The device a handle reads is no longer the one identified: another UUID answers
    there, or its partitions were made again (MIG instances created or destroyed). The
    backend has forgotten `forgotten` (the device and its partitions, by UUID); `pending`
    stands for what is there now, to be identified again."""

    def __init__(self, function: str, kind: str, pending: Undiscovered,
                 forgotten: tuple[str, ...]) -> None:
        super().__init__(function, kind)
        self.pending = pending
        self.forgotten = forgotten


@dataclass(frozen=True)
class DeviceReads:
    """What one cycle read from a device that answered."""

    readings: tuple[Reading, ...] = ()
    links: tuple[Link, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    processes_listed: bool = True  # False: the vendor library cannot list them


# How far outside a call's own span a library's time of the read may lie and still be taken
# (it keeps whole microseconds; the span is measured in floats).
REPORTED_SLACK_S = 0.001


def read_timed(read: Callable[[], T],
               reported: Callable[[T], float | None] | None = None) -> tuple[T, float]:
    """`read()`'s answer and the wall-clock time it was read at.

    For counters whose rates matter: stamped this way (`Link.counters_at`), a
    rate spans the time between two readings, not between two samples' starts.
    Where the library says when it read them (`reported(answer)`, seconds since
    1970) and that lies within the call, that time: on a busy host the call's
    thread can wait tens of milliseconds to run again after the library
    returns, and the call's middle then lies that far from the read. Else the
    middle of the call.
    """
    before = time.time()
    answer = read()
    after = time.time()
    said = reported(answer) if reported is not None and answer is not None else None
    if said is not None and before - REPORTED_SLACK_S <= said <= after + REPORTED_SLACK_S:
        return answer, min(max(said, before), after)
    return answer, (before + after) / 2


def sample_through_handle(
    device: Device, handle: Any, calls: CallErrors, read: Callable[[], DeviceReads]
) -> DeviceSample:
    """One cycle's sample of a device read through a vendor handle by `read`.

    The device is down when it has no handle (lost before discovery), when
    `read` raises DeviceDown or when it answered none of the calls `read` made
    (`CallErrors.raise_if_silent`); otherwise the sample carries what `read`
    returned and the calls that failed, for good or this cycle.
    """
    started = time.monotonic()
    taken_at = time.time()
    if handle is None:
        return DeviceSample(device=device, up=False, taken_at=taken_at,
                            errors=dict(calls.cycle_errors))
    calls.begin_cycle()
    try:
        reads = read()
        calls.raise_if_silent()
    except DeviceChanged:
        raise  # the runner identifies what is there now
    except DeviceDown as down:
        return DeviceSample(device=device, up=False, taken_at=taken_at,
                            duration_s=time.monotonic() - started,
                            errors={down.function: down.kind})
    return DeviceSample(
        device=device,
        up=True,
        taken_at=taken_at,
        duration_s=time.monotonic() - started,
        readings=reads.readings,
        processes=reads.processes,
        links=reads.links,
        errors={**calls.unsupported, **calls.cycle_errors},
        processes_listed=reads.processes_listed,
    )


class Backend(abc.ABC):
    """A vendor library behind one interface.

    `open()` loads the library and discovers devices, raising
    `BackendUnavailable` when it cannot (`BackendAbsent` when neither the library
    nor the devices are on the host). `sample()` reads one device and must
    not raise for a failing metric: the metric is left out of the sample and the
    failure counted in `errors`; a lost device comes back with `up=False`.
    Different devices may be sampled from different threads at once.

    A backend whose devices can each hang its library may split opening in two
    (the sampler then bounds each device's discovery like its sampling):
    `open_library()` opens the library and lists devices as `Undiscovered`, and
    `discover()` identifies one of them, on that device's own thread.
    """

    name: ClassVar[str]
    vendor: ClassVar[str]

    def __init__(self) -> None:
        self.errors = ErrorTally()

    @abc.abstractmethod
    def open(self) -> Sequence[Device]:
        """Initialise the vendor library and return the devices it sees."""

    @abc.abstractmethod
    def sample(self, device: Device) -> DeviceSample:
        """Read every value of one device that the vendor library offers."""

    def open_library(self) -> Sequence[Device | Undiscovered]:
        """The first step of opening: the library, and the devices it lists.

        By default the whole of `open()`: every device is identified in this one step.
        """
        return self.open()

    def discover(self, pending: Undiscovered) -> Sequence[Device]:
        """Identify one device `open_library()` listed as undiscovered: it, then its partitions.

        Raises when the device cannot be identified (it stays listed as down and is
        tried again later). Only called by backends whose `open_library` lists some.
        """
        raise NotImplementedError(f"{self.name} lists no undiscovered devices")

    def event_readings(self, device: Device) -> tuple[Reading, ...]:
        """Counts of events the backend received for `device` (NVIDIA: XIDs), without a call.

        Read while the device does not answer, so that events delivered before or
        as it was lost are still exported; must never call the vendor library.
        """
        return ()

    def facts(self) -> Mapping[str, str]:
        """Static facts about the vendor stack (driver version, library version)."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the vendor library."""


def open_in_turn(backend: Backend, on_failure: Callable[[Undiscovered, Exception], Device]
                 ) -> list[Device]:
    """`open_library()` then `discover()` of each listed device, one after the other.

    For callers that want every device at once (tools, `ray-accel topo`); a device
    that cannot be identified is listed as `on_failure` returns.
    """
    devices: list[Device] = []
    for item in backend.open_library():
        if not isinstance(item, Undiscovered):
            devices.append(item)
            continue
        try:
            devices.extend(backend.discover(item))
        except Exception as error:  # the device is listed down, with why
            devices.append(on_failure(item, error))
    return devices


@dataclass
class HandleDevice:
    """A discovered device, its vendor handle (None if lost before discovery) and call state.

    `lock` keeps the device's calls to one thread at a time.
    """

    device: Device
    handle: Any
    calls: CallErrors
    lock: threading.Lock = field(default_factory=threading.Lock, kw_only=True)


Tracked = TypeVar("Tracked", bound=HandleDevice)


class HandleBackend(Backend, Generic[Tracked]):
    """A backend that reads each device through a handle its vendor library gave it.

    Subclasses fill `_tracked` (device uuid -> HandleDevice) and `_facts` in
    `open()` and read one device's values in `_read()`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tracked: dict[str, Tracked] = {}
        self._facts: dict[str, str] = {}

    def facts(self) -> Mapping[str, str]:
        return dict(self._facts)

    def sample(self, device: Device) -> DeviceSample:
        tracked = self._tracked.get(device.uuid)
        if tracked is None:  # forgotten this cycle (DeviceChanged): to be identified again
            return DeviceSample(device=device, up=False, taken_at=time.time(),
                                errors={"identity": "changed: identified again"})
        with tracked.lock:
            return sample_through_handle(tracked.device, tracked.handle, tracked.calls,
                                         partial(self._read, tracked))

    def _open_in_turn(self) -> list[Device]:
        """For a backend that splits its opening, `open()`: the library and every device,
        identified in turn (for tools; the sampler bounds each step)."""
        open_in_turn(self, self._listed_down)
        return [t.device for t in self._tracked.values()]  # as last joined: with every pair

    def _listed_down(self, pending: Undiscovered, error: Exception) -> Device:
        """A device that cannot even be identified is still listed, as down, with why."""
        placeholder = pending.placeholder
        tracked = self._without_handle(placeholder)
        tracked.calls.cycle_errors["discovery"] = str(error)
        self._tracked[placeholder.uuid] = tracked
        return placeholder

    def _without_handle(self, device: Device) -> Tracked:
        """What the backend tracks for a device it has no handle for (split backends)."""
        raise NotImplementedError(f"{self.name} opens in one step")

    @abc.abstractmethod
    def _read(self, tracked: Tracked) -> DeviceReads:
        """This cycle's values of a device that has a handle; raises DeviceDown if lost."""
