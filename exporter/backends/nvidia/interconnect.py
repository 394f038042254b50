"""NVLink and PCIe links of an NVIDIA GPU: what they connect to, and their counters.

What a link connects to is read once, when the device is discovered. A cycle
then reads the device's link counters in one `nvmlDeviceGetFieldValues` call
(each value carries its own status, so an unsupported counter costs only
itself). The byte counters are read every cycle, or, where GPM measures every
link's rate this cycle, only when due (counter_reads.py: the PCIe ones alone
where only their 32-bit wrap makes them due), and exported as last read in
between with their age (the collective-stall detector then takes the links'
rates from GPM's readings: exporter/collective.py). The NVLink error counters join
the call, and the link states and the current PCIe link generation and width
are read, on the device's slow cadence (cadence.py), and are exported as last
read in between.
"""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any

import pynvml

from ... import catalog as m
from ...model import Labels, Link, Reading
from ..base import read_timed
from ..calls import NOT_SUPPORTED, text
from ..pcie import MT_PER_S
from .calls import DeviceCalls
from .counter_reads import READ_NONE, READ_PCIE, CounterSchedule
from .getters import scalar
from .gpm import PCIE_LINK, MeasuredLinks
from .probes import reading

KIB = 1024
PCIE = m.LINK_PCIE
NVLINK = m.LINK_NVLINK

_REMOTE_TYPES = {
    pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "ibmnpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch",
}
# Per-link (scoped) counters: field id -> (metric, labels, scale to base units); the
# metric's catalog cadence says whether a field is in every cycle's call or the slow one's.
_NVLINK_FIELDS: tuple[tuple[int, str, Labels, int], ...] = (
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, m.LINK_IO, (("direction", m.TRANSMIT),), KIB),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, m.LINK_IO, (("direction", m.RECEIVE),), KIB),
    (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, m.LINK_ERRORS,
     (("error_type", m.LINK_ERROR_CRC),), 1),
    (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, m.LINK_ERRORS,
     (("error_type", m.LINK_ERROR_REPLAY),), 1),
    (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, m.LINK_ERRORS,
     (("error_type", m.LINK_ERROR_RECOVERY),), 1),
)
_PCIE_FIELDS: tuple[tuple[int, str, Labels, int], ...] = (
    (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, m.LINK_IO, (("direction", m.TRANSMIT),), 1),
    (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, m.LINK_IO, (("direction", m.RECEIVE),), 1),
)
_LINK_UP = (Reading(m.LINK_UP, 0.0), Reading(m.LINK_UP, 1.0))
READ_SLOW = -1  # a `_counters` read of the byte counters with the slow-cadence fields
_HOST_FACTS = {"remote_type": "host"}  # what the PCIe link connects to (shared, never changed)
WRAP = 2**32  # where a 32-bit counter wraps
PCIE_MOST_EVER = max(MT_PER_S.values()) * 1e6 / 8 * 32  # bytes/s: the newest, x32
PCIE_IO = "pcie_io"  # the key of a sample's errors entry when PCIe byte counters are withheld
WRAPS_UNKNOWN = "wraps_unknown"  # ... its kind where GPM could not tell how many wraps


@dataclass(frozen=True)
class NvLinkFacts:
    """What one NVLink connects to, read at discovery."""

    index: int
    version: str = ""
    remote_type: str = ""
    remote_pci_bus_id: str = ""

    def as_facts(self, peer_uuid: str = "") -> dict[str, str]:
        return {"version": self.version, "remote_type": self.remote_type,
                "remote_pci_bus_id": self.remote_pci_bus_id, "peer_uuid": peer_uuid}


def pcie_most_bytes_per_s(max_readings: tuple[Reading, ...]) -> float:
    """The most bytes a second a PCIe link of the generation and width in `max_readings`
    (`pcie_max_readings`) can move a direction: its signalling rate, no encoding taken off,
    so a bound; where either is unknown, the most any PCIe link can (`PCIE_MOST_EVER`)."""
    found = {r.metric: r.value for r in max_readings}
    rate = MT_PER_S.get(int(found.get(m.PCIE_GENERATION, 0)))
    width = found.get(m.PCIE_WIDTH)
    return PCIE_MOST_EVER if rate is None or not width else rate * 1e6 / 8 * width


def hidden_wraps(delta: int, expected: float | None, most: float | None) -> int | None:
    """How many whole wraps a 32-bit counter's `delta` since its last read (its change
    modulo 2^32) hides: the count that brings it closest to `expected` (the bytes GPM
    measured since), never more than `most` (the most its link could move since) allows;
    with no `expected`, none where `most` allows none, else unknown (None)."""
    ceiling = None if most is None else max(int((most - delta) // WRAP), 0)
    if expected is not None:
        wraps = max(round((expected - delta) / WRAP), 0)
        return wraps if ceiling is None else min(wraps, ceiling)
    return 0 if ceiling == 0 else None


@dataclass
class CounterUnwrapper:
    """Monotonic totals of 32-bit counters that wrap. The total starts at the first value read.

    A real H200 (driver 580) answers the PCIe byte counters (fields 197/198) as
    32-bit values, which NVML documents as "can be wrapped": above 4.3 GB/s they
    wrap more than once a second, so a read every second can miss whole wraps.
    For those, `hidden_wraps` decides from GPM's bytes over the interval, or the
    link's most; where neither can tell, the total is withheld (None) and the bytes
    of that interval count as none: the next read that can tell adds its own
    interval's bytes to the total as last exported. The total never goes down (a
    restart from zero would read as a driver's reading that cannot be true, and
    Prometheus would count the same bytes either way).
    Any other 32-bit counter is assumed to wrap at most once between reads.
    """

    last: dict[int, tuple[int, float]] = field(default_factory=dict)  # (raw, read at)
    totals: dict[int, int] = field(default_factory=dict)

    def total(self, position: int, raw: int, now: float = 0.0, pcie: bool = False,
              expected: float | None = None, most_per_s: float | None = None) -> int | None:
        """The total of the counter at `position` after reading `raw` at `now`; for a `pcie`
        counter, given the bytes GPM measured since its last read (`expected`) and its
        link's most bytes a second (`most_per_s`), either None where unknown."""
        previous = self.last.get(position)
        self.last[position] = (raw, now)
        if previous is None:
            self.totals[position] = raw
            return raw
        delta = (raw - previous[0]) % WRAP
        if pcie:
            most = None if most_per_s is None else most_per_s * max(now - previous[1], 0.0)
            wraps = hidden_wraps(delta, expected, most)
            if wraps is None:
                return None
            delta += wraps * WRAP
        self.totals[position] += delta
        return self.totals[position]


# What one requested field means: (the link's slot: its place among the device's NVLinks, or
# after them for the PCIe link; metric, labels, scale).
_Meaning = tuple[int, str, Labels, int]


def _request_array(requests: list[tuple[int, int]]) -> Any:
    """(field id, scope id) pairs as the NVML array `nvmlDeviceGetFieldValues` fills in."""
    values = (_PlainFieldValue * len(requests))()
    for value, (field_id, scope) in zip(values, requests, strict=True):
        value.fieldId, value.scopeId = field_id, scope
    return values


@dataclass
class LinkLayout:
    """A device's links and the field requests that read their counters in one call.

    `cycle_values` asks for the byte counters; `slow_values` for those same fields
    (at the same positions) followed by the slow-cadence ones; `pcie_values` for the
    PCIe byte counters alone (at `pcie_at` in the other two).
    """

    nvlinks: tuple[NvLinkFacts, ...] = ()
    peer_uuids: dict[int, str] = field(default_factory=dict)  # NVLink index -> GPU at its end
    pcie_max: tuple[Reading, ...] = ()
    pcie_current: tuple[Reading, ...] = ()  # generation and width, as last read (slow cadence)
    meanings: list[_Meaning] = field(default_factory=list)  # in `slow_values` order
    unwrapper: CounterUnwrapper = field(default_factory=CounterUnwrapper)
    cycle_values: Any = field(default=None, repr=False)
    slow_values: Any = field(default=None, repr=False)
    pcie_values: Any = field(default=None, repr=False)
    pcie_at: int = 0  # where the PCIe byte counters are in `cycle_values` and `slow_values`
    pcie_most: float = PCIE_MOST_EVER  # the most bytes/s the PCIe link can move a direction
    # NVLink index -> its slow readings (error counters, state) as last read
    slow_readings: dict[int, tuple[Reading, ...]] = field(default_factory=dict)
    schedule: CounterSchedule = field(default_factory=CounterSchedule)
    link_state: Callable[..., int] = field(  # nvmlDeviceGetNvLinkState, its buffer kept
        default_factory=partial(scalar, "nvmlDeviceGetNvLinkState"), repr=False)
    # the byte counters as last read, by link slot (NVLinks in order, then PCIe), and when
    # (the NVLinks', and the PCIe link's, which may be read alone)
    byte_readings: tuple[tuple[Reading, ...], ...] = ()
    bytes_read_at: float | None = None
    pcie_read_at: float | None = None
    link_keys: tuple[tuple[str, int], ...] = ()  # the links as GPM's rates name them
    # the NVLinks built from the counters as last read, and the peers they were built with
    built: tuple[tuple[Link, ...], dict[int, str]] | None = field(default=None, repr=False)
    pcie_link: tuple[Link, ...] | None = field(default=None, repr=False)  # ... the PCIe link
    # every link as last built: the same tuple while none is rebuilt, which later stages
    # (the reading checks, the rates) take as "nothing new on the links"
    links: tuple[Link, ...] = field(default=(), repr=False)
    _facts: dict[int, tuple[str, dict[str, str]]] = field(default_factory=dict, repr=False)
    _all_facts: tuple[dict[int, str], tuple[dict[str, str], ...]] | None = field(
        default=None, repr=False)

    def __post_init__(self) -> None:
        every, slow = [], []
        for slot, link in enumerate(self.nvlinks):
            for field_id, metric, labels, scale in _NVLINK_FIELDS:
                (slow if m.spec(metric).cadence is m.Cadence.SLOW else every).append(
                    ((field_id, link.index), (slot, metric, labels, scale)))
        for field_id, metric, labels, scale in _PCIE_FIELDS:
            every.append(((field_id, 0), (len(self.nvlinks), metric, labels, scale)))
        self.meanings = [meaning for _, meaning in (*every, *slow)]
        self.link_keys = (*((NVLINK, link.index) for link in self.nvlinks), PCIE_LINK)
        self.cycle_values = _request_array([request for request, _ in every])
        self.slow_values = _request_array([request for request, _ in (*every, *slow)])
        self.pcie_at = len(every) - len(_PCIE_FIELDS)
        self.pcie_values = _request_array([request for request, _ in every[self.pcie_at:]])
        self.pcie_most = pcie_most_bytes_per_s(self.pcie_max)

    def counter_total(self, position: int, raw: int, now: float) -> int | None:
        """The total of the 32-bit counter at `position` read as `raw` at `now`
        (`CounterUnwrapper`); None for PCIe bytes whose wraps since the last read are unknown."""
        direction = position - self.pcie_at  # the PCIe byte counters: transmit, then receive
        if 0 <= direction < len(_PCIE_FIELDS):
            moved = self.schedule.moved
            return self.unwrapper.total(position, raw, now, pcie=True,
                                        expected=None if moved is None else moved[direction],
                                        most_per_s=self.pcie_most)
        return self.unwrapper.total(position, raw, now)

    def facts_of(self, nvlink: NvLinkFacts) -> dict[str, str]:
        """The link's facts with its peer GPU, built again only when the peer changes."""
        peer = self.peer_uuids.get(nvlink.index, "")
        cached = self._facts.get(nvlink.index)
        if cached is None or cached[0] != peer:
            cached = self._facts[nvlink.index] = (peer, nvlink.as_facts(peer))
        return cached[1]

    def nvlink_facts(self) -> tuple[dict[str, str], ...]:
        """`facts_of` each NVLink, in order; looked up again only when the peers change."""
        if self._all_facts is None or self._all_facts[0] != self.peer_uuids:
            self._all_facts = (dict(self.peer_uuids),
                               tuple(self.facts_of(nvlink) for nvlink in self.nvlinks))
        return self._all_facts[1]


def _quiet(fn: Any, *args: Any) -> Any | None:
    """A discovery-time NVML call whose failure only means "not there"."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def discover_nvlinks(handle: Any) -> tuple[NvLinkFacts, ...]:
    """The device's NVLinks that exist (active or not), with what each connects to."""
    links = []
    for index in range(pynvml.NVML_NVLINK_MAX_LINKS):
        if _quiet(pynvml.nvmlDeviceGetNvLinkState, handle, index) is None:
            break  # past the device's last link (or no NVLink at all)
        version = _quiet(pynvml.nvmlDeviceGetNvLinkVersion, handle, index)
        remote = _quiet(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, index)
        remote_type = _quiet(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, index)
        links.append(NvLinkFacts(
            index=index,
            version="" if version is None else str(version),
            remote_type=_REMOTE_TYPES.get(remote_type, "") if remote_type is not None else "",
            remote_pci_bus_id=text(remote.busId) if remote is not None else "",
        ))
    return tuple(links)


def pcie_max_readings(handle: Any) -> tuple[Reading, ...]:
    """The most the device's PCIe link can do; it never changes, so it is read once."""
    found = []
    generation = _quiet(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    if generation is not None:
        found.append(reading(m.PCIE_GENERATION, generation, state=m.PCIE_MAX))
    width = _quiet(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
    if width is not None:
        found.append(reading(m.PCIE_WIDTH, width, state=m.PCIE_MAX))
    return tuple(found)


class _PlainFieldValue(ctypes.Structure):
    """nvmlFieldValue_t without the binding's per-attribute hooks, for reading answers fast."""

    _fields_ = pynvml.c_nvmlFieldValue_t._fields_


def nvmlDeviceGetFieldValues(handle: Any, values: Any) -> Any:
    """NVML's field-value call on a request array built once (`LinkLayout.request_values`).

    The binding's wrapper builds a new array, attribute by attribute, on every
    call: for 18 NVLinks that cost more CPU than the driver call itself.
    """
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
    pynvml._nvmlCheckReturn(fn(handle, ctypes.c_int32(len(values)), ctypes.byref(values)))
    return values


# One nvmlFieldValue_t as read back: its timestamp (microseconds since 1970), valueType,
# nvmlReturn and the value's 8 bytes as one unsigned integer (fieldId, scopeId and
# latencyUsec are skipped).
_FIELD_ANSWER = "8xq8xIIQ"
assert struct.calcsize("=" + _FIELD_ANSWER) == ctypes.sizeof(_PlainFieldValue)


@lru_cache(maxsize=16)
def _answers_layout(count: int) -> struct.Struct:
    return struct.Struct("=" + _FIELD_ANSWER * count)


def _field_answers(values: Any) -> Iterator[tuple[int, int, int]]:
    """(valueType, nvmlReturn, raw value bits) of each field in `values`, read straight from
    the array's memory (its buffer)."""
    fields = _answers_layout(len(values)).unpack_from(values)
    return zip(fields[1::4], fields[2::4], fields[3::4], strict=True)


def _fields_read_at(values: Any) -> float | None:
    """When NVML says it read the fields in `values` (the newest of their timestamps, in
    seconds since 1970); None where it gave none."""
    newest = max(_answers_layout(len(values)).unpack_from(values)[0::4], default=0)
    return newest / 1e6 if newest > 0 else None


def _signed(raw: int, bits: int) -> int:
    raw &= (1 << bits) - 1
    return raw - (1 << bits) if raw >> (bits - 1) else raw


def _field_number(value_type: int, raw: int) -> float:
    """The value of a field's union, read as its `valueType` says (NVML_VALUE_TYPE_*)."""
    if value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(raw & 0xFFFFFFFF)
    if value_type == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return struct.unpack("=d", raw.to_bytes(8, sys.byteorder))[0]
    if value_type == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(_signed(raw, 64))
    if value_type == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return float(_signed(raw, 32))
    if value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return float(raw & 0xFFFF)
    if value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG and ctypes.sizeof(ctypes.c_ulong) == 4:
        return float(raw & 0xFFFFFFFF)
    return float(raw)  # unsigned long (64-bit) and unsigned long long


def _counters(calls: DeviceCalls, handle: Any, layout: LinkLayout, read: int,
              now: float) -> tuple[list[list[Reading]], float] | None:
    """The counters `read` asks for (`READ_ALL`: the byte counters; `READ_SLOW`: with the slow
    fields; `READ_PCIE`: PCIe's alone) at `now`, by link slot (the NVLinks in order, then the
    PCIe link), and when they were read (`read_timed`); None when the call failed. PCIe byte
    counters whose wraps cannot be told are left out, and the device's errors say why
    (`PCIE_IO`: not supported at this interval where GPM never measured the link,
    `WRAPS_UNKNOWN` where it missed a cycle)."""
    if read == READ_PCIE:
        request, first = layout.pcie_values, layout.pcie_at
    else:
        request, first = (layout.slow_values if read == READ_SLOW else layout.cycle_values), 0
    values, read_at = read_timed(partial(calls.call, nvmlDeviceGetFieldValues, handle, request,
                                         every_cycle=True), _fields_read_at)
    if values is None:
        return None
    by_link: list[list[Reading]] = [[] for _ in range(len(layout.nvlinks) + 1)]
    success, unsigned_int = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    unsigned_long_long = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    # the request's meanings: the zip below stops at the request's end
    meanings = layout.meanings[first:] if first else layout.meanings
    for position, ((value_type, status, raw), (slot, metric, labels, scale)) in (
            enumerate(zip(_field_answers(values), meanings, strict=False), first)):
        if status == success:
            if value_type == unsigned_long_long:  # the NVLink counters: the common case first
                number = float(raw)
            elif value_type == unsigned_int:  # every field is a counter; 32 bits wrap
                total = layout.counter_total(position, raw & 0xFFFFFFFF, now)
                if total is None:
                    calls.cycle_errors[PCIE_IO] = (WRAPS_UNKNOWN if layout.schedule
                                                   .pcie_measured else NOT_SUPPORTED)
                    continue
                number = float(total)
            else:
                number = _field_number(value_type, raw)
            by_link[slot].append(Reading(metric, number * scale, labels))
    return by_link, read_at


def _slow_link_readings(calls: DeviceCalls, handle: Any, nvlink: NvLinkFacts,
                        counters: list[Reading], link_state: Callable[..., int],
                        ) -> tuple[Reading, ...]:
    """A link's slow-cadence readings: its error counters (in `counters`) and its state."""
    found = [r for r in counters if r.metric == m.LINK_ERRORS]
    state = calls.call(link_state, handle, nvlink.index, key=f"link{nvlink.index}",
                       every_cycle=True)
    if state is not None:
        found.append(_LINK_UP[1 if state else 0])
    return tuple(found)


def _pcie_current(calls: DeviceCalls, handle: Any) -> Iterator[Reading]:
    """The PCIe link's current generation and width (slow cadence)."""
    generation = calls.call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle, every_cycle=True)
    if generation is not None:
        yield reading(m.PCIE_GENERATION, generation, state=m.PCIE_CURRENT)
    width = calls.call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle, every_cycle=True)
    if width is not None:
        yield reading(m.PCIE_WIDTH, width, state=m.PCIE_CURRENT)


def _read_counters(calls: DeviceCalls, handle: Any, layout: LinkLayout, read: int,
                   now: float) -> None:
    """Reads the counters `read` asks for into `layout` (see `_counters`): the byte counters
    by link slot and when they were read (none, and no time, where the call failed)."""
    answer = _counters(calls, handle, layout, read, now)
    counters: list[list[Reading]]
    read_at: float | None
    if answer is None:  # every byte counter is absent this cycle; link states still read
        layout.schedule.failed()
        counters, read_at = [[] for _ in range(len(layout.nvlinks) + 1)], None
    else:
        counters, read_at = answer
    if read == READ_SLOW:
        for nvlink, readings in zip(layout.nvlinks, counters, strict=False):
            layout.slow_readings[nvlink.index] = _slow_link_readings(
                calls, handle, nvlink, readings, layout.link_state)
        counters = [[r for r in readings if r.metric == m.LINK_IO] for readings in counters]
    if read_at is None:
        layout.byte_readings, layout.bytes_read_at, layout.pcie_read_at = (
            tuple(map(tuple, counters)), None, None)
        layout.built = None
    elif read == READ_PCIE:
        layout.byte_readings = (*layout.byte_readings[:-1], tuple(counters[-1]))
        layout.pcie_read_at = read_at
        layout.schedule.done(now, pcie_only=True)
    else:
        layout.byte_readings = tuple(map(tuple, counters))
        layout.bytes_read_at = layout.pcie_read_at = read_at
        layout.built = None
        layout.schedule.done(now)
    layout.pcie_link = None


def read_links(calls: DeviceCalls, handle: Any, layout: LinkLayout, slow: bool = True,
               measured: MeasuredLinks | None = None,
               now: float = 0.0) -> tuple[tuple[Link, ...], tuple[Reading, ...]]:
    """This cycle's links (NVLinks, then the PCIe host link) and the device's PCIe readings.

    With `slow`, the slow-cadence link values (and the PCIe link's current generation and
    width) are read too and kept in `layout`; without it the ones last read are exported
    again. With `measured`, the link rates GPM measured this cycle, the byte counters are
    read only when due (counter_reads.py: the PCIe ones alone where only their wrap
    needs it; `now` is the backend's clock), else exported as last read, with their age.
    """
    read = layout.schedule.due(now, measured, layout.link_keys)
    if slow:
        read = READ_SLOW
    if read != READ_NONE:
        _read_counters(calls, handle, layout, read, now)
    if slow:
        layout.pcie_current = tuple(_pcie_current(calls, handle))
    rebuilt = False
    if layout.built is None or layout.built[1] != layout.peer_uuids:
        layout.built, rebuilt = (_nvlinks(layout), dict(layout.peer_uuids)), True
    if layout.pcie_link is None:
        pcie = layout.byte_readings[-1] if layout.byte_readings else ()
        layout.pcie_link = (Link(PCIE, 0, pcie, _HOST_FACTS, {}, layout.pcie_read_at),
                            ) if pcie else ()
        rebuilt = True
    if rebuilt:
        layout.links = (*layout.built[0], *layout.pcie_link)
    return layout.links, (
        *layout.pcie_current, *layout.pcie_max,
        *layout.schedule.age(now, nvlinks=bool(layout.nvlinks)))


def _nvlinks(layout: LinkLayout) -> tuple[Link, ...]:
    """The device's NVLinks with their byte counters and slow link values as last read."""
    links = []
    slow_readings, read_at = layout.slow_readings, layout.bytes_read_at
    for nvlink, facts, readings in zip(layout.nvlinks, layout.nvlink_facts(),
                                       layout.byte_readings, strict=False):
        index = nvlink.index
        links.append(Link(NVLINK, index, readings + slow_readings.get(index, ()), facts, {},
                          read_at))  # positional: made often
    return tuple(links)
