"""Sampled values over time -> the scenario's signals and counters (docs/simulation.md).

A gauge becomes a keyframe signal: a constant when it never moved, else the
fewest keyframes that stay within a tolerance of every sample (linear), or
one keyframe per change (step). A counter becomes `{"start", "rate_per_s"}`
whose rate is a step signal: the replay (which floors the integral) reaches the
recorded count at the boundaries of every merged segment, a hair above it, so it
counts what the node counted. Past `MAX_KEYFRAMES`, keyframes are thinned evenly
over the whole recording.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, TypeVar

Point = tuple[float, float]
T = TypeVar("T")
MAX_KEYFRAMES = 4096
# How far above each recorded count the replayed integral lands (relative, plus as much of
# one count): more than a rate rounded to `RATE_DIGITS` (5e-10 of it) and the replay's
# float sums leave out, so its floor gives the count, never the one below.
COUNT_MARGIN = 1e-9
RATE_DIGITS = 10  # significant digits of a counter's rate


def _number(value: float) -> float | int:
    rounded = round(value)
    return int(rounded) if abs(value - rounded) < 1e-9 else round(value, 6)


def _significant(value: float, digits: int = RATE_DIGITS) -> float | int:
    """`value` to `digits` significant digits (an int when whole)."""
    rounded = float(f"{value:.{digits}g}")
    return int(rounded) if rounded.is_integer() else rounded


def _evenly(items: Sequence[T], limit: int) -> list[T]:
    """At most `limit` (>= 2) of `items`, spread evenly over them, the first and last kept."""
    if len(items) <= limit:
        return list(items)
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def _tolerance(values: Sequence[float], relative: float, absolute: float) -> float:
    return max(absolute, relative * max(abs(v) for v in values))


def _segment_end(t0: float, v0: float, t: float, low: float, high: float,
                 bounds: tuple[float, float]) -> float:
    """Where a segment from (t0, v0) ends at t: on the middle of the slopes that fit its
    points, moved (within those slopes) to stay inside `bounds`, the range ever read."""
    end = v0 + (low + high) / 2 * (t - t0)
    inside = min(max(end, bounds[0]), bounds[1])
    return v0 + min(max((inside - v0) / (t - t0), low), high) * (t - t0)


def _swinging_door(points: Sequence[Point], relative: float, absolute: float) -> list[Point]:
    """Keyframes of a polyline within max(`absolute`, `relative` x |value|) of every point.

    The swinging-door compression of process historians, in one pass: from each
    keyframe, the slopes that pass within tolerance of every later point narrow as
    points come; when none is left, the segment ends at the previous point, on the
    middle slope (or the nearest one that keeps it within the values read: a GPU
    busy at 100 % is never fitted at 100.02 %).
    """
    bounds = (min(v for _, v in points), max(v for _, v in points))
    t0, v0 = points[0]
    kept = [(t0, v0)]
    low, high = -math.inf, math.inf
    previous_t = t0
    for t, v in points[1:]:
        if t <= t0:
            continue
        tolerance = max(absolute, relative * abs(v)) if v else 0.0  # a zero stays zero
        new_low = max(low, (v - tolerance - v0) / (t - t0))
        new_high = min(high, (v + tolerance - v0) / (t - t0))
        if new_low > new_high:
            v0 = _segment_end(t0, v0, previous_t, low, high, bounds)
            t0 = previous_t
            kept.append((t0, v0))
            new_low = (v - tolerance - v0) / (t - t0)
            new_high = (v + tolerance - v0) / (t - t0)
        low, high = new_low, new_high
        previous_t = t
    if previous_t > t0:
        kept.append((previous_t, _segment_end(t0, v0, previous_t, low, high, bounds)))
    return kept


def gauge_signal(points: Sequence[Point], *, step: bool = False, relative: float = 0.002,
                 absolute: float = 0.0) -> Any:
    """A signal through `points` (t, value), t increasing; None when there are none.

    Linear keyframes stay within max(`absolute`, `relative` x |value|) of every point
    (swinging door), and pass through each point that read 0 exactly: zero is what
    judgements look for (a limiter that held for none of an interval, an idle
    engine), not noise. Step keyframes keep every change. A signal that moves less
    than that tolerance of its largest value, and never between 0 and another
    value, is a constant.
    """
    if not points:
        return None
    values = [v for _, v in points]
    if all(v == int(v) for v in values):
        absolute = max(absolute, 1.0)  # whole numbers (percent, MHz, C): within one unit
    tolerance = _tolerance(values, relative, absolute)
    zero_and_not = 0 in values and any(values)
    if max(values) - min(values) <= (0 if step or zero_and_not else tolerance):
        return _number(values[-1] if step else sum(values) / len(values))
    if step:
        frames = [points[0]] + [points[i] for i in range(1, len(points))
                                if points[i][1] != points[i - 1][1]]
    else:
        frames = _swinging_door(points, relative, absolute)
        while len(frames) > MAX_KEYFRAMES:
            relative, absolute = relative * 2, max(absolute, tolerance) * 2
            frames = _swinging_door(points, relative, absolute)
        # Where no slope that fits the points keeps a corner inside the range read (a
        # climb that stops at 100 % between two samples), the range wins: the scenario
        # would refuse 100.8 %, and the device never read it.
        frames = [(t, min(max(v, min(values)), max(values))) for t, v in frames]
    frames = _evenly(frames, MAX_KEYFRAMES)  # a step signal that changed more often
    signal: dict[str, Any] = {"keyframes": [[round(t, 3), _number(v)] for t, v in frames]}
    if step:
        signal["interpolate"] = "step"
    return signal


def unwrap(points: Sequence[Point], wrap: int | None = None) -> list[Point]:
    """Counter readings made monotonic: a drop is a wrap at `wrap`, or (without) a reset."""
    out: list[Point] = []
    total = 0.0
    previous: float | None = None
    for t, value in points:
        if previous is not None:
            delta = value - previous
            if delta < 0:
                delta = delta % wrap if wrap else value
            total += delta
        else:
            total = value
        previous = value
        out.append((t, total))
    return out


def _rate_changes(totals: Sequence[Point], relative: float) -> list[int]:
    """Indices of the totals (two or more) the replayed rate changes at, first and last
    included.

    Neighbouring intervals whose rates differ by less than `relative` are one at their
    mean rate. Where that interval counts fewer than 1 / `relative` (a few errors, each
    of which matters), it takes in only an interval no slower than itself: the line
    through them then reaches every recorded count by its time, never later.
    """
    ends = [0, 1]
    for j in range(2, len(totals)):
        (ta, va), (tb, vb), (tj, vj) = totals[ends[-2]], totals[ends[-1]], totals[j]
        mean, rate = (vb - va) / (tb - ta), (vj - vb) / (tj - tb)
        if (abs(rate - mean) <= relative * max(abs(mean), abs(rate))
                and (rate >= mean or (vj - va) * relative >= 1)):
            ends[-1] = j
        else:
            ends.append(j)
    return ends


def counter_signal(points: Sequence[Point], *, scale: float = 1.0, relative: float = 0.01,
                   wrap: int | None = None) -> Any:
    """`{"start", "rate_per_s"}` (or a constant int) reproducing the counter `points`.

    `scale` converts the readings to the scenario's unit (e.g. bytes -> KiB).
    Neighbouring intervals whose rates differ by less than `relative` are merged
    into one at their mean rate (`_rate_changes`). At each kept boundary, placed at
    or before its reading's time (ms), the replayed counter is the recorded total
    (a hair above, so the replay's floor gives it), whatever the rates' rounding.
    """
    if not points:
        return None
    totals: list[Point] = []
    for t, v in unwrap(points, wrap):
        t = math.floor(t * 1000) / 1000
        if totals and t <= totals[-1][0]:
            totals[-1] = (totals[-1][0], v * scale)  # read within the same ms: the later
        else:
            totals.append((t, v * scale))
    if len(totals) < 2 or totals[-1][1] == totals[0][1]:
        return int(totals[-1][1])
    kept = [totals[i] for i in _evenly(_rate_changes(totals, relative), MAX_KEYFRAMES)]
    (t0, v0), (t1, v1) = kept[:2]
    # The scenario counts from t = 0: before the first reading it ran at the first rate, or,
    # where that would have counted from below zero, it held that reading.
    before = v0 - (v1 - v0) / (t1 - t0) * t0
    if before < 0 and not wrap:
        before = math.floor(v0)
        kept.insert(0, (0.0, before))
    start = math.ceil(before)
    base = int(start % (wrap * scale)) if wrap else start
    offset, replayed = start - base, float(base)  # whole wraps left out of `start`
    rates: list[tuple[float, float | int]] = []
    since = 0.0
    for (t, _), (until, total) in itertools.pairwise(kept):
        target = total - offset  # held where the replay is already there
        rate = _significant((target * (1 + COUNT_MARGIN) + COUNT_MARGIN - replayed)
                            / (until - since)) if target > replayed else 0
        replayed += rate * (until - since)
        rates.append((t, rate))
        since = until
    if len({r for _, r in rates}) == 1:
        rate_per_s: Any = rates[0][1]
    else:
        rate_per_s = {"keyframes": [[t, r] for t, r in rates], "interpolate": "step"}
    return {"start": base, "rate_per_s": rate_per_s}


def midpoints(points: Sequence[Point], interval_s: float) -> list[Point]:
    """Interval averages (GPM activity, residencies) placed at the middle of their interval
    (the first: one `interval_s` long)."""
    return [(max(t - ((t - points[i - 1][0]) if i else interval_s) / 2, 0.0), v)
            for i, (t, v) in enumerate(points)]
