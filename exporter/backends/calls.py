"""The one wrapper every vendor library call goes through: failures classified and scoped.

A vendor backend says only how its library's exceptions map to a `Failure`
(kind, permanent?, device down?); what follows is the same for every vendor:

- every failed call is counted in the backend's `ErrorTally` by (kind, function);
- a device-down failure raises `DeviceDown`: nothing more is read from the
  device this cycle, it is reported down;
- a permanent failure (not supported, no permission, a function the library
  release lacks) leaves the value absent and the call is not made again on
  that device (the answer will not change);
- any other failure leaves the value absent for this cycle only;
- every failure of the cycle is in `cycle_errors`, named by function (and key);
- an exception that is not the vendor library's (its Python layer failing to
  convert an answer, say) is permanent, of kind `wrapper_<exception type>`.

Calls of every vendor module (NVML, amdsmi, pyhlml) are timed into `CALL_CPU_S`,
by function, so that `ray-accel record` can replay each costly call as a `busy`
delay. Optionally (NVIDIA turns it on) a call that spent more than `slow_call_cpu_s`
of this thread's CPU time twice in a row is answered from its last result until
`slow_reuse_s` has passed, then read and timed again, so the agent's cost stays
flat and no value is older than that. Calls made with `every_cycle=True` (link
byte counters, whose rates need each cycle) are never reused.

`reading()`, `text()` and `number()` turn vendor answers into catalog readings
and plain values, the same way for every backend.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..model import Reading

perf_counter = time.perf_counter

log = logging.getLogger(__name__)

FUNCTION_NOT_FOUND = "function_not_found"
NOT_SUPPORTED = "not_supported"  # the kind of a feature a device does not offer
SLOW_REUSE_S = 10.0
#: A call that averages more CPU time than this is costly: recorded as a `busy` delay (and
#: NVIDIA's slow-call threshold). A call within it is timed by the wall clock alone.
COSTLY_CALL_CPU_S = 0.0003
#: Vendor function -> [calls answered, thread CPU seconds they spent (a fast call: its wall
#: time, which bounds them)] since the process started, for every vendor whose calls count
#: their costs (the function names tell the vendors apart).
CALL_CPU_S: dict[str, list[float]] = {}
_REPORTED_SLOW: set[str] = set()  # slow functions already logged, once per process


class DeviceDown(Exception):
    """The device stopped answering: nothing more can be read from it this cycle."""

    def __init__(self, function: str, kind: str) -> None:
        super().__init__(f"{function}: {kind}")
        self.function = function
        self.kind = kind


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


@dataclass(frozen=True, slots=True)
class Failure:
    """How one failed vendor call is scoped (see the module's doc)."""

    kind: str
    permanent: bool = False
    device_down: bool = False


def wrapper_failure(error: BaseException) -> Failure:
    """The failure of a vendor binding's own Python code: permanent, named by its type."""
    return Failure(f"wrapper_{type(error).__name__.lower()}", permanent=True)


class CallErrors:
    """What one device's vendor calls failed with: for good (never asked again) or this cycle.

    One thread at a time uses an instance.
    """

    def __init__(self, tally: ErrorTally) -> None:
        self._tally = tally
        self._unsupported: dict[str, str] = {}
        self.cycle_errors: dict[str, str] = {}
        self.cycle_answers = 0  # calls the vendor answered this cycle (not reused answers)

    def begin_cycle(self) -> None:
        """Start a new sampling cycle with no errors recorded."""
        self.cycle_errors = {}
        self.cycle_answers = 0

    @property
    def unsupported(self) -> dict[str, str]:
        """Calls this device never answers, with the reason."""
        return dict(self._unsupported)

    def note_unsupported(self, name: str, kind: str) -> None:
        """Record that the device lacks a feature a call answered about (not a failed call)."""
        self._unsupported[name] = kind

    def raise_if_failed(self, name: str) -> None:
        """Raises DeviceDown where the call `name` failed this cycle, not for good: a device
        whose identity (its UUID) was not read at discovery must not keep a stand-in's name
        for good; it is listed down with why and identified again."""
        kind = self.cycle_errors.get(name)
        if kind is not None and name not in self._unsupported:
            raise DeviceDown(name, kind)

    def silence(self) -> str | None:
        """The failure kind of a cycle in which every call the device was asked failed (a
        device that needs a reset, or has gone, answers no call with any code); None where
        it answered one. A device that merely lacks every feature asked (its calls
        unsupported, never asked again) is not silent, nor is one whose answers were all
        reused."""
        if self.cycle_answers:
            return None
        unsupported = self._unsupported
        return next((kind for name, kind in self.cycle_errors.items()
                     if name not in unsupported), None)

    def raise_if_silent(self) -> None:
        """Raises DeviceDown where the device was silent this cycle (`silence`): what was
        read before must not stand as this cycle's sample of a device that is up."""
        kind = self.silence()
        if kind is not None:
            raise DeviceDown("every call", kind)

    def failed(self, name: str, function: str, failure: Failure) -> None:
        """Scope one failed call of `function` (`name`: with its key).

        Raises:
            DeviceDown: the failure says the device stopped answering.
        """
        self._tally.count(failure.kind, function)
        if failure.device_down:
            raise DeviceDown(name, failure.kind) from None
        if failure.permanent:
            self._unsupported[name] = failure.kind
        self.cycle_errors[name] = failure.kind


class VendorCalls(CallErrors):
    """A device's calls into one vendor library, through `invoke`.

    Subclasses give the library's exception type (`vendor_error`), the code an
    exception carries (`error_code`, for `empty_on`) and its `failure` mapping.
    Instances live as long as the device.
    """

    vendor_error: type[BaseException] = Exception

    def __init__(self, tally: ErrorTally, slow_call_cpu_s: float | None = None,
                 slow_reuse_s: float = SLOW_REUSE_S,
                 clock: Callable[[], float] = time.monotonic,
                 call_costs: dict[str, list[float]] | None = None) -> None:
        super().__init__(tally)
        self._clock = clock
        self._slow_call_cpu_s = slow_call_cpu_s
        self._slow_reuse_s = slow_reuse_s
        # what a call's wall time must stay within to be timed by the wall clock alone
        self._fast_within = COSTLY_CALL_CPU_S if slow_call_cpu_s is None else slow_call_cpu_s
        self._costs = call_costs  # function -> [calls answered, thread CPU seconds]
        self._timed = slow_call_cpu_s is not None or call_costs is not None
        self._reused: dict[str, tuple[float, Any]] = {}  # name -> (reuse until, answer)
        # Calls whose last timing was within the slow threshold, with their function's
        # entry in the cost table: timed by the wall clock only (see `_remember`).
        self._fast: dict[str, list[float]] = {}
        self._slow_streak: dict[str, int] = {}  # name -> slow answers in a row

    def error_code(self, error: BaseException) -> Any:
        """The status code a vendor exception carries (None by default)."""
        return None

    def failure(self, error: BaseException) -> Failure:
        """How a vendor exception is scoped; by default transient, named by its type."""
        return Failure(type(error).__name__.lower())

    def invoke(self, fn: Callable[..., Any], function: str, args: tuple[Any, ...], key: str = "",
               empty_on: Collection[Any] = (), empty: Any = None,
               every_cycle: bool = False) -> Any | None:
        """`fn(*args)`'s answer, or None when the value is absent (the failure scoped).

        `function` names the call in the tally; `key` tells calls of one function
        with different arguments apart in the memory of unsupported calls. Codes in
        `empty_on` are normal answers meaning "nothing to report" and return
        `empty` without counting an error.
        """
        name = (function + f"[{key}]") if key else function
        if name in self._unsupported:
            return None
        # A call fast last time (`cost` is its cost-table entry) is not being reused and is
        # timed by the wall clock alone; any other is looked up among the reused and timed here.
        cost = self._fast.get(name)
        now = cpu_before = 0.0
        if cost is None:
            if self._slow_call_cpu_s is not None:  # slow answers may be reused
                now = self._clock()
                reused = self._reused.get(name)
                if reused is not None and now < reused[0]:
                    return reused[1]
            if self._timed:
                cpu_before = time.thread_time()
        wall_before = perf_counter()
        try:
            answer = fn(*args)
        except Exception as error:  # the vendor's own errors and its binding's
            answer = self._answer_to(error, name, function, empty_on, empty)
            if answer is None:
                return None
        self.cycle_answers += 1
        if cost is not None:
            spent = perf_counter() - wall_before
            if spent <= self._fast_within:
                cost[0] += 1
                cost[1] += spent
            else:  # it may have been slow: timed on the CPU clock from its next call
                del self._fast[name]
        elif self._timed:
            self._remember(name, function, now, (cpu_before, wall_before), every_cycle,
                           answer)
        return answer

    def _answer_to(self, error: Exception, name: str, function: str,
                   empty_on: Collection[Any], empty: Any) -> Any | None:
        """The answer a failed call stands for: `empty` for a code in `empty_on`, else None
        (the failure scoped)."""
        if isinstance(error, self.vendor_error):
            if empty_on and self.error_code(error) in empty_on:
                return empty
            self.failed(name, function, self.failure(error))
        else:
            self.failed(name, function, wrapper_failure(error))
        return None

    def _remember(self, name: str, function: str, now: float,
                  started: tuple[float, float], every_cycle: bool, answer: Any) -> None:
        """Keeps a slow call's answer for reuse; forgets it once the call is fast again.

        `started` is (thread CPU time, wall time) before the call. A call whose wall time
        is within the slow threshold spent at most that much CPU, so its wall time stands
        for its CPU time, and a call that was fast last time is timed by the wall clock
        alone (`invoke`'s first path): the thread's CPU time is a system call
        (microseconds, on each of a cycle's calls). One of those that takes longer than
        the threshold by the wall clock is timed here, on the CPU clock, from its next
        call (that one's CPU is not known, so it neither counts as slow nor in the costs).
        """
        cpu_before, wall_before = started
        spent = perf_counter() - wall_before
        threshold = self._fast_within
        if spent > threshold:
            spent = time.thread_time() - cpu_before
        cost = self._cost_of(function)
        cost[0] += 1
        cost[1] += spent
        if spent <= threshold:
            self._fast[name] = cost
        if every_cycle or self._slow_call_cpu_s is None or spent <= self._slow_call_cpu_s:
            self._slow_streak.pop(name, None)
            self._reused.pop(name, None)
            return
        streak = self._slow_streak[name] = self._slow_streak.get(name, 0) + 1
        if streak >= 2:
            if name not in _REPORTED_SLOW:  # once per function, not once per device
                _REPORTED_SLOW.add(name)
                log.info("%s took %.2f ms of CPU: its answers are reused for %g s", name,
                         spent * 1e3, self._slow_reuse_s)
            self._reused[name] = (now + self._slow_reuse_s, answer)

    def _cost_of(self, function: str) -> list[float]:
        """`function`'s [calls, CPU seconds] in the cost table (a private pair without one)."""
        if self._costs is None:
            return [0, 0.0]
        return self._costs.setdefault(function, [0, 0.0])

    @property
    def reused(self) -> list[str]:
        """Calls answered from their last result for now, being slow."""
        return sorted(self._reused)


class ModuleCalls(VendorCalls):
    """Calls named by function of a vendor module (amdsmi, pyhlml): ``call("fn", *args)``.

    A function this release of the module lacks is permanent (`function_not_found`).
    Their costs are counted in `CALL_CPU_S` unless `call_costs` says otherwise.
    """

    def __init__(self, library: ModuleType, tally: ErrorTally, **options: Any) -> None:
        options.setdefault("call_costs", CALL_CPU_S)
        super().__init__(tally, **options)
        self.library = library

    def call(self, function: str, *args: Any, key: str = "") -> Any | None:
        """Call ``<library>.<function>(*args)``; its answer, or None when it is absent."""
        fn = getattr(self.library, function, None)
        if fn is None:
            name = function + (f"[{key}]" if key else "")
            if name not in self._unsupported:
                self.failed(name, function, Failure(FUNCTION_NOT_FOUND, permanent=True))
            return None
        return self.invoke(fn, function, args, key=key)


def reading(metric: str, value: float, **labels: str) -> Reading:
    """A reading of a catalog metric, its labels in the order given."""
    # Called for most readings of every cycle: a plain loop, no generator, for the usual
    # case of labels that are already text.
    items = tuple(labels.items())
    for _, label_value in items:
        if type(label_value) is not str:
            items = tuple((k, v if type(v) is str else str(v)) for k, v in items)
            break
    return Reading(metric, float(value), items)


def text(value: Any, absent: Collection[str] = ()) -> str:
    """A vendor string answer as text: bytes decoded (NULs and padding stripped);
    "" for None or for one of the `absent` placeholders (such as amdsmi's "N/A")."""
    if value is None:
        return ""
    found = value.decode(errors="replace").strip("\0 ") if isinstance(value, bytes) else str(value)
    return "" if found in absent else found


def number(value: Any) -> float | None:
    """A numeric vendor answer as a float; None for "N/A", booleans and other non-numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
