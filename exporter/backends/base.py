"""The small interface every vendor backend implements."""

from __future__ import annotations

import abc
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import ClassVar

from ..model import Device, DeviceSample


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
