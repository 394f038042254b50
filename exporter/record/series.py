"""One device's recorded series: (t, value) lists by series key, and lookups on them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

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
        if not frame.stale:  # a down device keeps only its counters and events
            link_t = t if links_t is None else links_t
            for key, value in frame.items():
                self.points.setdefault(key, []).append((link_t if key[0] == "l" else t, value))

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

    def matching(self, kind: str, metric: str) -> Iterable[tuple[SeriesKey, Points]]:
        """(key, points) of every series of one kind ("d", "l", "p") and metric."""
        for key, points in self.points.items():
            if key[0] == kind and key[-2] == metric:
                yield key, points


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(labels.items())


def label_map(key: SeriesKey) -> dict[str, str]:
    """The labels of a series key, as a dict."""
    return dict(key[-1])
