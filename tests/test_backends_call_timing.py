"""How the vendor call wrapper times calls (exporter/backends/calls.py).

Slow-call reuse judges a call by the thread's CPU time, but asking for it is a
system call on every one of a cycle's calls: a call that was fast last time is
timed by the wall clock alone (its wall time bounds its CPU time), and timed on
the CPU clock again once the wall clock says it may have been slow.
"""

from __future__ import annotations

import time

import pytest
from stepped_clock import SteppedClock

from ray_accel.exporter.backends.calls import ErrorTally, VendorCalls

THRESHOLD_S = 0.0003


@pytest.fixture
def cpu_clock_reads(monkeypatch) -> list[int]:
    """How many times the thread's CPU time was asked for (one item per ask)."""
    asked: list[int] = []
    thread_time = time.thread_time

    def counted() -> float:
        asked.append(1)
        return thread_time()

    monkeypatch.setattr(time, "thread_time", counted)
    return asked


def _spin(seconds: float) -> float:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return time.perf_counter()  # a new answer every call


def _calls(clock: SteppedClock) -> VendorCalls:
    return VendorCalls(ErrorTally(), slow_call_cpu_s=THRESHOLD_S, clock=clock)


def test_a_call_fast_last_time_is_timed_by_the_wall_clock_alone(cpu_clock_reads):
    calls = _calls(SteppedClock())
    for _ in range(200):
        assert calls.invoke(lambda: 1, "fast", ()) == 1
    # the first call asks once (before it; the wall clock then says it was fast), and the
    # others not at all, short of one the machine preempted for longer than the threshold
    assert 1 <= len(cpu_clock_reads) < 10


def test_a_call_that_turns_slow_is_timed_on_the_cpu_clock_again_then_reused():
    clock = SteppedClock()
    calls = _calls(clock)
    slow = [False]

    def answer() -> float:
        return _spin(0.002) if slow[0] else time.perf_counter()

    calls.invoke(answer, "turns_slow", ())
    slow[0] = True
    answers = []
    for second in range(1, 6):
        clock.now = second
        answers.append(calls.invoke(answer, "turns_slow", ()))
    # 1: slow by the wall clock, its CPU unknown; 2 and 3: slow on the CPU clock twice
    # in a row, so 3's answer is kept and given at 4 and 5
    assert answers[0] != answers[1] != answers[2]
    assert answers[2] == answers[3] == answers[4]
    assert calls.reused == ["turns_slow"]


def test_a_call_slow_only_by_the_wall_clock_is_never_reused():
    clock = SteppedClock()
    calls = _calls(clock)

    def sleeps() -> float:
        time.sleep(0.002)  # long, but not on this thread's CPU
        return time.perf_counter()

    answers = []
    for second in range(6):
        clock.now = second
        answers.append(calls.invoke(sleeps, "sleeps", ()))
    assert len(set(answers)) == 6
    assert calls.reused == []


def test_calls_timed_by_the_wall_clock_still_count_in_the_cost_table():
    costs: dict[str, list[float]] = {}
    calls = VendorCalls(ErrorTally(), slow_call_cpu_s=THRESHOLD_S, clock=SteppedClock(),
                        call_costs=costs)
    for _ in range(200):
        calls.invoke(lambda: 1, "fast", ())
    count, seconds = costs["fast"]
    # each call counted with its wall time, short of a few the machine preempted (not known)
    assert 150 <= count <= 200 and 0 < seconds <= count * THRESHOLD_S


def test_a_fast_call_that_fails_is_scoped_and_answers_again_after():
    calls = _calls(SteppedClock())
    failing = [False]

    def answer() -> int:
        if failing[0]:
            raise RuntimeError("the driver failed")
        return 7

    assert [calls.invoke(answer, "flaky", ()) for _ in range(5)] == [7] * 5
    calls.begin_cycle()
    failing[0] = True
    assert calls.invoke(answer, "flaky", ()) is None
    assert calls.cycle_errors == {"flaky": "runtimeerror"} and calls.unsupported == {}
    calls.begin_cycle()
    failing[0] = False
    assert calls.invoke(answer, "flaky", ()) == 7 and calls.cycle_errors == {}
