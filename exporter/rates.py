"""Per-second rates of link byte counters, from two consecutive samples of a device.

Prometheus users compute rates with PromQL; the JSON snapshot carries them
ready-made for the dashboard. A counter that went backwards (a driver reload,
a reset) yields no rate rather than a negative one. Where a backend stamps
when it read a link's counters (`Link.counters_at`), the rate spans the time
between the two readings, so a sample that started late does not skew it; a
link whose counters were not read again this cycle keeps its last rates.
"""

from __future__ import annotations

from dataclasses import fields, replace

from . import catalog as m
from .model import DeviceSample, Link

# Links are remade here with their rates, a hundred and more a cycle on an NVLink node: by
# their constructor, which is several times cheaper than `dataclasses.replace`.
assert [f.name for f in fields(Link)] == ["link_type", "index", "readings", "facts", "rates",
                                          "counters_at"]


def _byte_counters(link: Link) -> dict[str, float]:
    return {_direction(r.labels): r.value for r in link.readings if r.metric == m.LINK_IO}


def _direction(labels: tuple[tuple[str, str], ...]) -> str:
    if len(labels) == 1 and labels[0][0] == "direction":  # a byte counter's one label
        return labels[0][1]
    return dict(labels).get("direction", "")


def _read_at(link: Link, sample: DeviceSample) -> float:
    return sample.taken_at if link.counters_at is None else link.counters_at


def _rates(earlier: Link, previous: DeviceSample, link: Link,
           current: DeviceSample) -> dict[str, float]:
    if link.counters_at is not None and link.counters_at == earlier.counters_at:
        return dict(earlier.rates)  # the same reading as last cycle
    elapsed = _read_at(link, current) - _read_at(earlier, previous)
    if elapsed <= 0:
        return {}
    before = _byte_counters(earlier)
    return {
        direction: (value - before[direction]) / elapsed
        for direction, value in _byte_counters(link).items()
        if direction in before and value >= before[direction]
    }


def with_link_rates(previous: DeviceSample | None, current: DeviceSample) -> DeviceSample:
    """`current` with each link's bytes/s per direction since `previous`."""
    if previous is None or not current.links or not previous.links:
        return current
    before = {(link.link_type, link.index): link for link in previous.links}
    links = []
    for link in current.links:
        earlier = before.get((link.link_type, link.index))
        if earlier is None:
            links.append(link)
        elif (link.counters_at is not None and link.counters_at == earlier.counters_at
              and link.readings is earlier.readings and link.facts is earlier.facts):
            links.append(earlier)  # not read again: the same link, with the rates it has
        else:
            links.append(Link(link.link_type, link.index, link.readings, link.facts,
                              _rates(earlier, previous, link, current), link.counters_at))
    return replace(current, links=tuple(links))


class LinkRates:
    """`with_link_rates` for a runner's devices, remembering each device's last links.

    A device that hands back the links tuple of its last sample (the NVIDIA backend does
    while none of its links was read again) keeps the links, with their rates, of the
    sample before, as `with_link_rates` would one by one: where every link's counters are
    stamped (`Link.counters_at`), the same readings mean the same rates.
    """

    def __init__(self) -> None:
        # device uuid -> (the links it handed in, the same links with their rates)
        self._last: dict[str, tuple[tuple[Link, ...], tuple[Link, ...]]] = {}

    def of(self, previous: DeviceSample | None, current: DeviceSample) -> DeviceSample:
        """`current` with each link's bytes/s per direction since `previous`."""
        uuid = current.device.uuid
        last = self._last.get(uuid)
        if (previous is not None and last is not None and last[0] is current.links
                and last[1] is previous.links):
            return replace(current, links=previous.links)
        rated = with_link_rates(previous, current)
        if all(link.counters_at is not None for link in current.links):
            self._last[uuid] = (current.links, rated.links)
        else:
            self._last.pop(uuid, None)
        return rated
