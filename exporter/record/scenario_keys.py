"""Writing recorded series into a scenario device's keys: what every vendor's recorder shares.

A vendor module (nvidia.py, amd.py) lists which catalog series become which of
its scenario keys and by what factor from the base unit; the functions here
write them: last values for static facts, signals for gauges, `start` +
`rate_per_s` for error counters, and the energy counter's start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import catalog as m
from .series import DeviceSeries, Points
from .timeline import counter_signal, gauge_signal

# (catalog metric, its labels, scenario key, factor from the base unit)
Row = tuple[str, dict[str, str], str, float]


def put(target: dict[str, Any], key: str, value: Any) -> None:
    """`target[key] = value` unless value is None (a key never read stays absent)."""
    if value is not None:
        target[key] = value


def scaled(points: Points, factor: float, shift: float = 0.0) -> Points:
    """The points times `factor` (and `shift` s later, never before t = 0)."""
    return [(max(t + shift, 0.0), v * factor) for t, v in points]


def put_last(out: dict[str, Any], series: DeviceSeries, rows: Sequence[Row]) -> None:
    """Static facts: each series' last value, in the scenario's whole units."""
    for metric, labels, key, factor in rows:
        value = series.last(metric, **labels)
        if value is not None:
            out[key] = round(value * factor)


def put_gauges(out: dict[str, Any], series: DeviceSeries, rows: Sequence[Row],
               step_keys: frozenset[str] = frozenset()) -> None:
    """Gauges as keyframe signals (step signals for `step_keys`)."""
    for metric, labels, key, factor in rows:
        put(out, key, gauge_signal(scaled(series.device(metric, **labels), factor),
                                   step=key in step_keys))


def put_error_counts(out: dict[str, Any], series: DeviceSeries,
                     keys: Mapping[str, str]) -> None:
    """`hw.errors` counters by error type (`keys`: error type -> scenario key)."""
    for error_type, key in keys.items():
        put(out, key, counter_signal(series.device(m.HW_ERRORS, error_type=error_type)))


def energy_start(series: DeviceSeries, units_per_joule: float) -> int | None:
    """The energy counter at t = 0 (the replay integrates the recorded power from there),
    in the scenario's unit; None when energy was not read."""
    energy = series.device(m.ENERGY)
    if not energy:
        return None
    t, joules = energy[0]
    power = series.device(m.POWER)
    watts = power[0][1] if power else 0.0
    return max(round((joules - watts * t) * units_per_joule), 0)


def max_clocks(sm_key: str, memory_key: str) -> tuple[Row, Row]:
    """The rows of a device's maximum compute (SM, GFX) and memory clocks, in MHz."""
    return ((m.CLOCK_MAX_FREQUENCY, {"clock": m.CLOCK_SM}, sm_key, 1e-6),
            (m.CLOCK_MAX_FREQUENCY, {"clock": m.CLOCK_MEMORY}, memory_key, 1e-6))
