"""Samples -> scenario signals and counters (exporter/record/timeline.py)."""

from __future__ import annotations

import itertools
import math
import random

from ray_accel.exporter.record.timeline import MAX_KEYFRAMES, counter_signal, gauge_signal, unwrap
from ray_accel.exporter.simulate import load_scenario
from ray_accel.exporter.simulate.signals import counter_at, value_at


def _at(signal: object, t: float) -> float:
    """The value a linear or step signal takes at t (no period), as the scenario defines it."""
    if not isinstance(signal, dict):
        return float(signal)
    frames = signal["keyframes"]
    if t <= frames[0][0]:
        return frames[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(frames):
        if t0 <= t < t1:
            if signal.get("interpolate") == "step":
                return v0
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return frames[-1][1]


def _integral(rate: object, t: float, steps: int = 20000) -> float:
    if not isinstance(rate, dict):
        return float(rate) * t
    frames = rate["keyframes"]
    total = 0.0
    for i, (t0, r) in enumerate(frames):
        t1 = frames[i + 1][0] if i + 1 < len(frames) else math.inf
        lo = 0.0 if i == 0 else t0
        if t > lo:
            total += r * (min(t, t1) - lo)
    return total


def test_a_constant_gauge_is_one_number() -> None:
    assert gauge_signal([(float(t), 700.0) for t in range(60)]) == 700


def test_a_ramp_is_two_keyframes_and_stays_within_tolerance() -> None:
    points = [(float(t), 100.0 + 3.0 * t) for t in range(61)]
    signal = gauge_signal(points)
    assert len(signal["keyframes"]) == 2
    assert all(abs(_at(signal, t) - v) <= 0.002 * v + 1e-9 for t, v in points)


def test_a_jump_keeps_its_corners() -> None:
    points = [(float(t), 10.0 if t < 30 else 90.0) for t in range(60)]
    signal = gauge_signal(points)
    assert 3 <= len(signal["keyframes"]) <= 4
    assert all(abs(_at(signal, t) - v) < 1e-9 for t, v in points)


def test_keyframes_stay_within_the_range_read() -> None:
    # A whole-number reading that climbs to its ceiling between two samples and stays
    # there: the fitted slope of the climb must not carry a keyframe past 100 (a scenario
    # refuses 100.8 %); the climb's last samples are then fitted within two units.
    points = [(t * 0.97, float(min(100, 60 + 7 * t))) for t in range(20)]
    signal = gauge_signal(points)
    assert max(v for _, v in signal["keyframes"]) == 100
    assert min(v for _, v in signal["keyframes"]) == 60
    assert all(abs(_at(signal, t) - v) <= 2.0 for t, v in points)
    assert all(abs(_at(signal, t) - v) <= 1e-9 for t, v in points if v == 100)


def test_a_reading_of_zero_replays_as_zero() -> None:
    # A limiter's residency: none for 50 s, a sliver of one interval, then held. A line
    # from 0 to the sliver fits every zero within the tolerance, but replays a limiter
    # active (residency above 0) for the 50 s it held for none of.
    points = [(t + 0.5, 0.0) for t in range(50)] + [(50.5, 1.01)] + [
        (t + 0.5, 100.0) for t in range(51, 64)]
    signal = gauge_signal(points, absolute=1.0)
    assert all(_at(signal, t) == 0 for t, v in points if v == 0)
    assert all(abs(_at(signal, t) - v) <= 1.0 for t, v in points)
    # ... nor does a sliver beside zeros make a constant that is never zero
    sliver = [(float(t), 0.0) for t in range(60)] + [(60.0, 0.8)]
    assert all(_at(gauge_signal(sliver, absolute=1.0), t) == 0 for t, _ in sliver[:-1])


def test_step_signals_keep_every_change_only() -> None:
    points = [(float(t), 4.0 if 10 <= t < 25 else 0.0) for t in range(60)]
    signal = gauge_signal(points, step=True)
    assert signal == {"keyframes": [[0.0, 0], [10.0, 4], [25.0, 0]], "interpolate": "step"}


def test_noise_beyond_the_keyframe_limit_is_thinned() -> None:
    points = [(float(t), float(t % 2) * (1 + t / 1e5)) for t in range(3 * MAX_KEYFRAMES)]
    assert len(gauge_signal(points)["keyframes"]) <= MAX_KEYFRAMES


def test_counter_unwrapping_and_resets() -> None:
    assert unwrap([(0, 2**32 - 10), (1, 5)], wrap=2**32) == [(0, 2**32 - 10), (1, 2**32 + 5)]
    assert unwrap([(0, 100), (1, 40)]) == [(0, 100), (1, 140)]  # a reset counts from 0


def test_counter_reproduces_the_totals_it_was_read_at() -> None:
    rates = [5.0] * 20 + [50.0] * 20 + [5.0] * 20
    points, total = [], 1000.0
    for t, rate in enumerate(rates):
        points.append((t + 0.5, total))
        total += rate
    counter = counter_signal(points)
    assert isinstance(counter["rate_per_s"], dict)
    assert len(counter["rate_per_s"]["keyframes"]) == 3
    for t, want in points:
        assert abs(counter["start"] + _integral(counter["rate_per_s"], t) - want) <= 1.0


def test_counter_that_never_moved_is_a_constant() -> None:
    assert counter_signal([(0.0, 7.0), (1.0, 7.0)]) == 7


def test_every_shape_loads_as_a_scenario_value() -> None:
    device = {"uuid": "GPU-00000000-0000-0000-0000-000000000001", "name": "x",
              "power_mw": gauge_signal([(0.0, 1.0), (1.0, 5.0), (2.0, 1.0)]),
              "clocks_event_reasons": gauge_signal([(0.0, 0.0), (1.0, 4.0)], step=True),
              "pcie_replay": counter_signal([(0.0, 0.0), (1.0, 3.0), (2.0, 9.0)])}
    loaded = load_scenario({"devices": [device]})
    assert loaded["devices"][0]["pcie_replay"]["start"] == 0


def test_a_single_count_replays_from_its_reading_on() -> None:
    # One ECC error between two readings at any times: the replay (which floors the
    # counter) has it at the reading that saw it and after, never a hair below.
    rng = random.Random(7)
    for _ in range(1000):
        a = rng.uniform(0.1, 30)
        b = a + rng.uniform(0.05, 30)
        counter = counter_signal([(0.0, 0.0), (a, 0.0), (b, 1.0), (b + 1, 1.0)])
        assert [counter_at(counter, t) for t in (a, b, b + 0.5, b + 1)] == [0, 1, 1, 1], (
            a, b, counter)


def test_a_few_counts_replay_exactly_at_every_reading_and_never_go_back() -> None:
    # Error counters read at jittered times (and late cycles), a few counts now and then,
    # the first reading after t = 0: every reading replays exactly, and between two the
    # counter only climbs from one reading to the next.
    rng = random.Random(11)
    for _ in range(150):
        t, count, points = rng.uniform(0, 3), rng.randint(0, 50), []
        for _ in range(rng.randint(2, 120)):
            points.append((t, float(count)))
            t += rng.uniform(0.9, 1.1) if rng.random() < 0.9 else rng.uniform(0.1, 3)
            count += rng.randint(1, 3) if rng.random() < 0.3 else 0
        counter = counter_signal(points)
        assert [counter_at(counter, t) for t, _ in points] == [v for _, v in points], counter
        for (t0, v0), (t1, v1) in itertools.pairwise(points):
            replayed = [counter_at(counter, t0 + (t1 - t0) * k / 8) for k in range(9)]
            assert replayed == sorted(replayed) and v0 <= replayed[0] and replayed[-1] <= v1


def test_a_counter_beyond_the_keyframe_limit_is_thinned_over_the_whole_recording() -> None:
    # A rate that changes every second for 3 x MAX_KEYFRAMES s: the kept boundaries are
    # spread over all of it, the counter exact at each and close everywhere.
    points, total = [], 0.0
    for t in range(3 * MAX_KEYFRAMES):
        points.append((float(t), total))
        total += 100.0 if t % 2 else 1.0
    counter = counter_signal(points)
    frames = counter["rate_per_s"]["keyframes"]
    assert len(frames) <= MAX_KEYFRAMES
    assert frames[0][0] == 0.0 and frames[-1][0] >= len(points) - 4
    recorded = dict(points)
    # (every 20th: the replay's evaluation walks all the keyframes each time)
    assert all(counter_at(counter, t) == recorded[t] for t, _ in frames[::20])
    assert all(abs(counter_at(counter, t) - v) <= 101 for t, v in points[::50])


def test_a_step_signal_beyond_the_keyframe_limit_is_thinned_over_the_whole_recording() -> None:
    points = [(float(t), float(t // 2)) for t in range(6 * MAX_KEYFRAMES)]  # a change each 2 s
    signal = gauge_signal(points, step=True)
    assert len(signal["keyframes"]) <= MAX_KEYFRAMES
    assert all(abs(value_at(signal, t) - v) <= 3 for t, v in points[::50])
