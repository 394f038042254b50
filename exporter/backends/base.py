"""The small interface every vendor backend implements."""

from __future__ import annotations

import abc
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

from ..model import Device, DeviceSample, Link, ProcessSample, Reading

T = TypeVar("T")


class BackendUnavailable(RuntimeError):
    """The vendor library or driver cannot be used; the backend is reported down."""


class DeviceDown(Exception):
    """The device stopped answering: nothing more can be read from it this cycle."""

    def __init__(self, function: str, kind: str) -> None:
        super().__init__(f"{function}: {kind}")
        self.function = function
        self.kind = kind


class CallErrors:
    """What one device's vendor calls failed with: for good (never asked again) or this cycle.

    The per-device call wrappers of the backends build on it; one thread at a
    time uses an instance.
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
        """Calls this device never answers, with the reason."""
        return dict(self._unsupported)


@dataclass(frozen=True)
class DeviceReads:
    """What one cycle read from a device that answered."""

    readings: tuple[Reading, ...] = ()
    links: tuple[Link, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    processes_listed: bool = True  # False: the vendor library cannot list them


def read_timed(read: Callable[[], T]) -> tuple[T, float]:
    """`read()`'s answer and the wall-clock time it was read at (the middle of the call).

    For counters whose rates matter: stamped this way (`Link.counters_at`), a
    rate spans the time between two readings, not between two samples' starts.
    """
    before = time.time()
    answer = read()
    return answer, (before + time.time()) / 2


def sample_through_handle(
    device: Device, handle: Any, calls: CallErrors, read: Callable[[], DeviceReads]
) -> DeviceSample:
    """One cycle's sample of a device read through a vendor handle by `read`.

    The device is down when it has no handle (lost before discovery) or when
    `read` raises DeviceDown; otherwise the sample carries what `read` returned
    and the calls that failed, for good or this cycle.
    """
    started = time.monotonic()
    taken_at = time.time()
    if handle is None:
        return DeviceSample(device=device, up=False, taken_at=taken_at,
                            errors=dict(calls.cycle_errors))
    calls.begin_cycle()
    try:
        reads = read()
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


class ErrorTally:
    """Thread-safe counts of failed vendor calls, by error kind and function."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def count(self, kind: str, function: str) -> None:
        """Record one failed call of `function` that failed with `kind`."""
        with self._lock:
            self._counts[(kind, function)] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        """A copy of the counts, keyed by (kind, function)."""
        with self._lock:
            return dict(self._counts)


class Backend(abc.ABC):
    """A vendor library behind one interface.

    `open()` loads the library and discovers devices, raising
    `BackendUnavailable` when it cannot. `sample()` reads one device and must
    not raise for a failing metric: the metric is left out of the sample and the
    failure counted in `errors`; a lost device comes back with `up=False`.
    Different devices may be sampled from different threads at once.
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

    def facts(self) -> Mapping[str, str]:
        """Static facts about the vendor stack (driver version, library version)."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the vendor library."""


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
        tracked = self._tracked[device.uuid]
        with tracked.lock:
            return sample_through_handle(tracked.device, tracked.handle, tracked.calls,
                                         partial(self._read, tracked))

    @abc.abstractmethod
    def _read(self, tracked: Tracked) -> DeviceReads:
        """This cycle's values of a device that has a handle; raises DeviceDown if lost."""
