"""What a device that does not answer still exports: its counters and its events.

A counter's last value stays true while its device is lost or hung (the errors,
joules and bytes counted so far were counted), and dropping the series would
hide the very XID and ECC counts that explain the loss from a Prometheus that
did not scrape in between. Gauges (utilization, power, temperature) are not
true any more, so they go. For every backend, the sampler builds a down or
stale device's sample here from its last one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from . import catalog as m
from .model import DeviceSample, Labels, Link, Reading


def _is_counter(reading: Reading) -> bool:
    try:
        return m.spec(reading.metric).kind is m.Kind.COUNTER
    except KeyError:  # not in the catalog: no sink exports it anyway
        return False


def counters_of(readings: Iterable[Reading]) -> tuple[Reading, ...]:
    """The readings of counter metrics, in their order."""
    return tuple(r for r in readings if _is_counter(r))


def _with_events(readings: tuple[Reading, ...], events: Iterable[Reading]) -> tuple[Reading, ...]:
    """`readings` with each event count replacing the reading of the same series."""
    merged: dict[tuple[str, Labels], Reading] = {(r.metric, r.labels): r for r in readings}
    for event in events:
        merged[(event.metric, event.labels)] = event
    return tuple(merged.values())


def _carried_link(link: Link, read_at: float) -> Link | None:
    counters = counters_of(link.readings)
    if not counters:
        return None
    return Link(link.link_type, link.index, counters, facts=link.facts,
                counters_at=link.counters_at if link.counters_at is not None else read_at)


def carried(previous: DeviceSample | None, now: DeviceSample,
            events: Iterable[Reading] = ()) -> DeviceSample:
    """The sample to publish for a device that is down or stale this cycle.

    `now` says why (its `up`, `stale` and `errors` are kept); `previous` is the
    device's last published sample, whose counters (its own and its links')
    are kept at their values and time (`taken_at`, so the sample's age grows);
    `events` are counts the backend holds for the device (`event_readings`),
    newer than any sample. Processes are not kept: who uses a device that does
    not answer is not known.
    """
    if previous is None:
        return replace(now, readings=_with_events(counters_of(now.readings), events),
                       links=(), processes=())
    links = tuple(link for link in (_carried_link(link, previous.taken_at)
                                    for link in previous.links) if link is not None)
    return replace(
        now,
        taken_at=previous.taken_at,
        readings=_with_events(counters_of(previous.readings), events),
        links=links,
        processes=(),
    )
