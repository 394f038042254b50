"""One device's recorded series: (t, value) lists by series key, and lookups on them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from functools import cache

from .. import catalog as m
from ..model import Labels
from .frames import DeviceFrame, SeriesKey

Points = list[tuple[float, float]]


@dataclass
class DeviceSeries:
    """The frames of one device, as series keyed like frames.series_of."""

    up_times: list[float] = field(default_factory=list)
    down_times: list[float] = field(default_factory=list)  # up False, not stale
    stale_times: list[float] = field(default_factory=list)
    points: dict[SeriesKey, Points] = field(default_factory=dict)
    errors: list[tuple[float, dict[str, str]]] = field(default_factory=list)

    def failed_with(self, call: str, kinds: Collection[str]) -> bool:
        """Whether `call` (a function's name; the samples' keys may add "[what]") failed with
        one of `kinds` in any sample."""
        return any(kind in kinds for _, errors in self.errors for key, kind in errors.items()
                   if key.partition("[")[0] == call)

    def add(self, t: float, frame: DeviceFrame, links_t: float | None = None) -> None:
        """Add one frame taken at t (its link counters read at `links_t`, if known)."""
        if frame.stale:
            self.stale_times.append(t)
        elif not frame.up:
            self.down_times.append(t)
        else:
            self.up_times.append(t)
        if frame.errors:
            self.errors.append((t, dict(frame.errors)))
        if frame.stale:  # a down device keeps only its counters and events
            return
        link_t = t if links_t is None else links_t
        pairs = list(frame.items())
        ages = {cadence: age for k, age in pairs if (cadence := _AGE_OF.get(k))}
        for key, value in pairs:
            when = link_t if key[0] == "l" else t  # link byte counters: when they were read
            age = ages.get(_cadence(key[-2])) if key[0] != "p" and ages else None
            if age is not None:
                when = max(t - age, 0.0)  # the value is from the last read on its cadence
            points = self.points.get(key)
            if points and points[-1][0] >= when - 1e-6:
                continue  # the same read again, exported between reads
            self.points.setdefault(key, []).append((when, value))

    @property
    def first_t(self) -> float:
        """When the device's first frame was taken."""
        return min([*self.up_times[:1], *self.down_times[:1], *self.stale_times[:1]],
                   default=0.0)

    def device(self, metric: str, **labels: str) -> Points:
        """Points of a device reading with exactly these labels."""
        return self.points.get(("d", metric, _labels(labels)), [])

    def last(self, metric: str, **labels: str) -> float | None:
        found = self.device(metric, **labels)
        return found[-1][1] if found else None

    def pcie_link(self) -> dict[str, int] | None:
        """The scenario's `pcie_link` (generation and width, current and max), if all read."""
        states = (m.PCIE_CURRENT, m.PCIE_MAX)
        gen = {state: self.last(m.PCIE_GENERATION, state=state) for state in states}
        width = {state: self.last(m.PCIE_WIDTH, state=state) for state in states}
        if None in gen.values() or None in width.values():
            return None
        return {"gen_current": int(gen[m.PCIE_CURRENT]), "gen_max": int(gen[m.PCIE_MAX]),
                "width_current": int(width[m.PCIE_CURRENT]), "width_max": int(width[m.PCIE_MAX])}

    def matching(self, kind: str, metric: str) -> Iterable[tuple[SeriesKey, Points]]:
        """(key, points) of every series of one kind ("d", "l", "p") and metric."""
        for key, points in self.points.items():
            if key[0] == kind and key[-2] == metric:
                yield key, points


# A backend that reads some values on a slower cadence than its samples (NVIDIA: slow, and
# rare for energy) gives, with each sample, how much older than it those values are
# (exporter/catalog.py); the series key of each age -> the cadence it is of.
SLOW_VALUES_AGE = m.SLOW_VALUES_AGE
_AGE_OF = {("d", m.SLOW_VALUES_AGE, ()): "slow", ("d", m.RARE_VALUES_AGE, ()): "rare"}


@cache
def _cadence(metric: str) -> str:
    """The cadence the catalog marks the metric as read on ("slow", "rare"; "" for each
    cycle's)."""
    try:
        cadence = getattr(m.spec(metric), "cadence", None)
    except KeyError:
        return ""
    return str(getattr(cadence, "value", "") or "")


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(labels.items())


def label_map(key: SeriesKey) -> dict[str, str]:
    """The labels of a series key, as a dict."""
    return dict(key[-1])
