"""Per-second rates of link byte counters, from two consecutive samples of a device.

Prometheus users compute rates with PromQL; the JSON snapshot carries them
ready-made for the dashboard. A counter that went backwards (a driver reload,
a reset) yields no rate rather than a negative one.
"""

from __future__ import annotations

from dataclasses import replace

from . import catalog as m
from .model import DeviceSample, Link


def _byte_counters(link: Link) -> dict[str, float]:
    return {dict(r.labels).get("direction", ""): r.value
            for r in link.readings if r.metric == m.LINK_IO}


def with_link_rates(previous: DeviceSample | None, current: DeviceSample) -> DeviceSample:
    """`current` with each link's bytes/s per direction since `previous`."""
    if previous is None or not current.links or not previous.links:
        return current
    elapsed = current.taken_at - previous.taken_at
    if elapsed <= 0:
        return current
    before = {(link.link_type, link.index): _byte_counters(link) for link in previous.links}
    links = []
    for link in current.links:
        earlier = before.get((link.link_type, link.index), {})
        rates = {
            direction: (value - earlier[direction]) / elapsed
            for direction, value in _byte_counters(link).items()
            if direction in earlier and value >= earlier[direction]
        }
        links.append(replace(link, rates=rates))
    return replace(current, links=tuple(links))
