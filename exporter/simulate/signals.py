"""Scenario signals and counters evaluated in Python, exactly as the C fake evaluates them.

A signal is a number or ``{"keyframes": [[t, v], ...], "period_s", "interpolate"}``;
a counter is an integer or ``{"start": n, "rate_per_s": signal}`` whose value is
``floor(start + integral of the rate from 0 to t)``. Outside its keyframes a
curve holds its end values; a periodic curve repeats every ``period_s``.
The simulated AMD library (``fake_amdsmi``) reads values through these.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

Curve = Sequence[tuple[float, float]]


def _curve(signal: Mapping[str, Any]) -> tuple[Curve, float, bool]:
    """The keyframes (with wrap points for periodic curves), period and step flag."""
    frames = [(float(t), float(v)) for t, v in signal["keyframes"]]
    period = float(signal.get("period_s") or 0)
    if period > 0:
        # As in the C fake: the last point repeated one period earlier and the
        # first one a period later, so every x in [0, period) lies inside.
        frames = [(frames[-1][0] - period, frames[-1][1]), *frames,
                  (frames[0][0] + period, frames[0][1])]
    return frames, period, signal.get("interpolate", "linear") == "step"


def _curve_at(frames: Curve, step: bool, x: float) -> float:
    if len(frames) == 1 or x < frames[0][0]:
        return frames[0][1]
    if x >= frames[-1][0]:
        return frames[-1][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(frames):
        if t0 <= x < t1:
            if step or t1 <= t0:
                return v0
            return v0 + (v1 - v0) * (x - t0) / (t1 - t0)
    return frames[-1][1]


def _curve_integral(frames: Curve, step: bool, a: float, b: float) -> float:
    """Integral of a curve over [a, b], a <= b."""
    total = 0.0
    first_t, first_v = frames[0]
    last_t, last_v = frames[-1]
    if a < first_t:
        total += first_v * (min(b, first_t) - a)
    if b > last_t:
        total += last_v * (b - max(a, last_t))
    for (t0, v0), (t1, v1) in itertools.pairwise(frames):
        lo, hi = max(a, t0), min(b, t1)
        if hi <= lo:
            continue
        if step:
            total += v0 * (hi - lo)
        else:
            slope = (v1 - v0) / (t1 - t0)
            total += 0.5 * (v0 + slope * (lo - t0) + v0 + slope * (hi - t0)) * (hi - lo)
    return total


def value_at(signal: Any, t: float) -> float:
    """The value of a signal at scenario time t."""
    if not isinstance(signal, Mapping):
        return float(signal)
    frames, period, step = _curve(signal)
    x = t % period if period > 0 else t
    return _curve_at(frames, step, x)


def integral(signal: Any, t: float) -> float:
    """The integral of a signal from 0 to t (0 for t <= 0)."""
    if not t > 0:
        return 0.0
    if not isinstance(signal, Mapping):
        return float(signal) * t
    frames, period, step = _curve(signal)
    if period <= 0:
        return _curve_integral(frames, step, 0.0, t)
    cycles = math.floor(t / period)
    rest = t - cycles * period
    return (cycles * _curve_integral(frames, step, 0.0, period)
            + _curve_integral(frames, step, 0.0, rest))


def counter_at(counter: Any, t: float) -> int:
    """The value of a counter at scenario time t."""
    if not isinstance(counter, Mapping):
        return int(counter)
    return math.floor(counter.get("start", 0) + integral(counter["rate_per_s"], t))
