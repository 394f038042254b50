"""NVLink and PCIe links of an NVIDIA GPU: what they connect to, and their counters.

What a link connects to is read once, when the device is discovered. Each
cycle then reads every link counter of the device in one
`nvmlDeviceGetFieldValues` call (each value carries its own status, so an
unsupported counter costs only itself), plus the link states and the current
PCIe link generation and width.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pynvml

from ... import catalog as m
from ...model import Link, Reading
from ..base import read_timed
from .calls import DeviceCalls
from .probes import reading

KIB = 1024
PCIE = "pcie"
NVLINK = "nvlink"

_REMOTE_TYPES = {
    pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "ibmnpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch",
}
# Per-link (scoped) counters: field id -> (metric, labels, scale to base units)
_NVLINK_FIELDS: tuple[tuple[int, str, dict[str, str], int], ...] = (
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, m.LINK_IO, {"direction": "transmit"}, KIB),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, m.LINK_IO, {"direction": "receive"}, KIB),
    (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, m.LINK_ERRORS, {"error_type": "crc"}, 1),
    (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, m.LINK_ERRORS, {"error_type": "replay"}, 1),
    (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, m.LINK_ERRORS, {"error_type": "recovery"}, 1),
)
_PCIE_FIELDS: tuple[tuple[int, str, dict[str, str], int], ...] = (
    (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, m.LINK_IO, {"direction": "transmit"}, 1),
    (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, m.LINK_IO, {"direction": "receive"}, 1),
)
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                  6: "usVal"}


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


@dataclass
class CounterUnwrapper:
    """Monotonic totals of 32-bit counters that wrap, assuming at most one wrap between reads.

    A real H200 (driver 580) answers the PCIe byte counters (fields 197/198) as
    32-bit values, which NVML documents as "can be wrapped": at 4 GB/s they wrap
    every second. The total starts at the first value read.
    """

    last: dict[int, int] = field(default_factory=dict)
    totals: dict[int, int] = field(default_factory=dict)

    def total(self, position: int, raw: int) -> int:
        previous = self.last.get(position)
        self.last[position] = raw
        if previous is None:
            self.totals[position] = raw
        else:
            self.totals[position] += (raw - previous) % 2**32
        return self.totals[position]


@dataclass
class LinkLayout:
    """A device's links and the field requests that read their counters in one call."""

    nvlinks: tuple[NvLinkFacts, ...] = ()
    peer_uuids: dict[int, str] = field(default_factory=dict)  # NVLink index -> GPU at its end
    pcie_max: tuple[Reading, ...] = ()
    requests: list[tuple[int, int]] = field(default_factory=list)
    meanings: list[tuple[str, int, str, dict[str, str], int]] = field(default_factory=list)
    unwrapper: CounterUnwrapper = field(default_factory=CounterUnwrapper)
    request_values: Any = field(default=None, repr=False)  # the requests as NVML's array

    def __post_init__(self) -> None:
        for link in self.nvlinks:
            for field_id, metric, labels, scale in _NVLINK_FIELDS:
                self.requests.append((field_id, link.index))
                self.meanings.append((NVLINK, link.index, metric, labels, scale))
        for field_id, metric, labels, scale in _PCIE_FIELDS:
            self.requests.append((field_id, 0))
            self.meanings.append((PCIE, 0, metric, labels, scale))
        self.request_values = (_PlainFieldValue * len(self.requests))()
        for value, (field_id, scope) in zip(self.request_values, self.requests, strict=True):
            value.fieldId, value.scopeId = field_id, scope


def _quiet(fn: Any, *args: Any) -> Any | None:
    """A discovery-time NVML call whose failure only means "not there"."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


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
            remote_pci_bus_id=_text(remote.busId) if remote is not None else "",
        ))
    return tuple(links)


def pcie_max_readings(handle: Any) -> tuple[Reading, ...]:
    """The most the device's PCIe link can do; it never changes, so it is read once."""
    found = []
    generation = _quiet(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    if generation is not None:
        found.append(reading(m.PCIE_GENERATION, generation, state="max"))
    width = _quiet(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
    if width is not None:
        found.append(reading(m.PCIE_WIDTH, width, state="max"))
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


def _field_value(value: Any) -> float:
    return float(getattr(value.value, _VALUE_MEMBERS.get(value.valueType, "ullVal")))


def _counters(calls: DeviceCalls, handle: Any,
              layout: LinkLayout) -> dict[tuple[str, int], list[Reading]]:
    by_link: dict[tuple[str, int], list[Reading]] = {}
    values = calls.call(nvmlDeviceGetFieldValues, handle, layout.request_values,
                        every_cycle=True)
    for position, (value, (link_type, index, metric, labels, scale)) in enumerate(zip(
        values if values is not None else (), layout.meanings, strict=False
    )):
        if value.nvmlReturn == pynvml.NVML_SUCCESS:
            number = _field_value(value)
            if value.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:  # every field is a counter
                number = layout.unwrapper.total(position, int(number))
            by_link.setdefault((link_type, index), []).append(
                reading(metric, number * scale, **labels))
    return by_link


def _pcie_current(calls: DeviceCalls, handle: Any) -> Iterator[Reading]:
    generation = calls.call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle)
    if generation is not None:
        yield reading(m.PCIE_GENERATION, generation, state="current")
    width = calls.call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
    if width is not None:
        yield reading(m.PCIE_WIDTH, width, state="current")


def read_links(calls: DeviceCalls, handle: Any,
               layout: LinkLayout) -> tuple[tuple[Link, ...], tuple[Reading, ...]]:
    """This cycle's links (NVLinks, then the PCIe host link) and the device's PCIe readings."""
    counters, read_at = read_timed(partial(_counters, calls, handle, layout))
    links = []
    for nvlink in layout.nvlinks:
        readings = counters.get((NVLINK, nvlink.index), [])
        state = calls.call(pynvml.nvmlDeviceGetNvLinkState, handle, nvlink.index,
                           key=f"link{nvlink.index}")
        if state is not None:
            readings.append(reading(m.LINK_UP, 1 if state else 0))
        links.append(Link(NVLINK, nvlink.index, tuple(readings),
                          nvlink.as_facts(layout.peer_uuids.get(nvlink.index, "")),
                          counters_at=read_at))
    if (PCIE, 0) in counters:
        links.append(Link(PCIE, 0, tuple(counters[(PCIE, 0)]), {"remote_type": "host"},
                          counters_at=read_at))
    return tuple(links), (*_pcie_current(calls, handle), *layout.pcie_max)
