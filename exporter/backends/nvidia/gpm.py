"""GPM activity metrics (Hopper and newer): engine, pipe and link activity per cycle.

NVML's GPM API measures between two samples. Each cycle takes one sample of the
device (or of a MIG device's GPU instance, through `nvmlGpmMigSampleGet` on the
parent's handle) and computes every metric over the interval since the
previous cycle's sample, so no extra thread and no sleep; the first cycle has
no values. The two sample buffers are allocated once and swapped.

With the cycle's NVML utilization it also judges whether the device spins
(busy, not computing: exporter/activity.py) and exports that verdict.

A device without GPM (Ampere and older, or a VM where it is off) has no GPM
series at all, never zeros, and its samples say so in one entry of their
errors (`gpm: not_supported`). A GPM call that fails costs only the GPM values of its
device (through `DeviceCalls`). Two in a row that take longer than `SLOW_CALL_S`
of wall time, or one longer than `HUNG_CALL_S`, suspend GPM on the device for
`SUSPEND_S`, so a slow driver cannot hold up the device's other values cycle
after cycle; one slow call alone is as likely the thread waiting for a busy
CPU as a slow driver, and suspends nothing.
"""

from __future__ import annotations

import ctypes
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import mul
from typing import Any

import pynvml

from ... import catalog as m
from ...activity import ActivityView, SpinningWindow
from ...model import Reading, labels_of
from ..calls import NOT_SUPPORTED
from .calls import DeviceCalls

MIB = 1024 * 1024
NVLINK_LINKS = 18  # NVLink 4 and 5: 18 links per GPU
C2C_LINKS = 14
SLOW_CALL_S = 0.05
HUNG_CALL_S = 1.0
SUSPEND_S = 60.0
GPM_UNSUPPORTED = "gpm"  # the key of the `not_supported` entry in a sample's errors

_METRIC_SIZE = ctypes.sizeof(pynvml.c_nvmlGpmMetric_t)
_set_field = ctypes.Structure.__setattr__
# One c_nvmlGpmMetric_t as read back: metricId, nvmlReturn, value; its metricInfo is skipped.
_METRIC_ANSWER = f"Iid{_METRIC_SIZE - struct.calcsize('=Iid')}x"
_METRICS_AT = pynvml.c_nvmlGpmMetricsGet_t.metrics.offset


# A link's per-cycle rate as GPM measures it: (link type, link number) -> direction -> bytes/s;
# the PCIe host link is ("pcie", 0), as the backend's links are numbered.
LinkRates = dict[tuple[str, int], dict[str, float]]
PCIE_LINK = (m.LINK_PCIE, 0)


@dataclass(frozen=True, slots=True)
class MeasuredLinks:
    """What GPM measured of a device's links this cycle: the links it measured both ways,
    and the PCIe link's (transmit, receive) bytes/s (None where not measured both ways)."""

    links: frozenset[tuple[str, int]]
    pcie: tuple[float, float] | None


def measured_links(rates: LinkRates) -> MeasuredLinks:
    """`MeasuredLinks` of the rates GPM measured, link by link."""
    pcie = rates.get(PCIE_LINK)
    both = pcie is not None and m.TRANSMIT in pcie and m.RECEIVE in pcie
    return MeasuredLinks(frozenset(link for link, directions in rates.items()
                                   if len(directions) >= 2),
                         (pcie[m.TRANSMIT], pcie[m.RECEIVE]) if both else None)


@dataclass(frozen=True, slots=True)
class GpmMetric:
    """How one GPM metric id becomes a catalog reading: NVML's value (percent or MiB/s) x scale."""

    metric_id: int
    name: str
    scale: float
    labels: tuple[tuple[str, str], ...]
    link: tuple[str, int, str] | None = None  # a link rate's (link type, number, direction)


def _percent(metric_id: int, name: str, **labels: str) -> GpmMetric:
    return GpmMetric(metric_id, name, 0.01, labels_of(labels))


def _mib_per_s(metric_id: int, name: str, rate_of: tuple[str, int, str] | None = None,
               **labels: str) -> GpmMetric:
    return GpmMetric(metric_id, name, float(MIB), labels_of(labels), rate_of)


def _link_metrics() -> Iterator[GpmMetric]:
    """Per-link NVLink and C2C (total, not data-only) bandwidth, both directions."""
    families = (("nvlink", NVLINK_LINKS, "NVLINK_L{link}_{suffix}_PER_SEC"),
                ("c2c", C2C_LINKS, "C2C_LINK{link}_TOTAL_{suffix}_PER_SEC"))
    for link_type, links, pattern in families:
        for link in range(links):
            for suffix, direction in (("TX", m.TRANSMIT), ("RX", m.RECEIVE)):
                metric_id = getattr(pynvml, "NVML_GPM_METRIC_" + pattern.format(link=link,
                                                                                suffix=suffix))
                yield _mib_per_s(metric_id, m.LINK_THROUGHPUT, (link_type, link, direction),
                                 link_type=link_type, link=str(link), direction=direction)


GPM_METRICS: tuple[GpmMetric, ...] = (
    _percent(pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, m.ACTIVITY, engine=m.ENGINE_GRAPHICS),
    _percent(pynvml.NVML_GPM_METRIC_SM_UTIL, m.ACTIVITY, engine=m.ENGINE_SM),
    _percent(pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, m.ACTIVITY, engine="sm_occupancy"),
    _percent(pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, m.ACTIVITY, engine="dram"),
    _percent(pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, m.PIPE_ACTIVITY, pipe=m.PIPE_TENSOR),
    _percent(pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL, m.PIPE_ACTIVITY, pipe="tensor_dfma"),
    _percent(pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL, m.PIPE_ACTIVITY, pipe="tensor_hmma"),
    _percent(pynvml.NVML_GPM_METRIC_DMMA_TENSOR_UTIL, m.PIPE_ACTIVITY, pipe="tensor_dmma"),
    _percent(pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL, m.PIPE_ACTIVITY, pipe="tensor_imma"),
    _percent(pynvml.NVML_GPM_METRIC_FP64_UTIL, m.PIPE_ACTIVITY, pipe="fp64"),
    _percent(pynvml.NVML_GPM_METRIC_FP32_UTIL, m.PIPE_ACTIVITY, pipe="fp32"),
    _percent(pynvml.NVML_GPM_METRIC_FP16_UTIL, m.PIPE_ACTIVITY, pipe="fp16"),
    _percent(pynvml.NVML_GPM_METRIC_INTEGER_UTIL, m.PIPE_ACTIVITY, pipe="integer"),
    _mib_per_s(pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, m.PCIE_THROUGHPUT,
               (m.LINK_PCIE, 0, m.TRANSMIT), direction=m.TRANSMIT),
    _mib_per_s(pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, m.PCIE_THROUGHPUT,
               (m.LINK_PCIE, 0, m.RECEIVE), direction=m.RECEIVE),
    *_link_metrics(),
)


# The GPM readings an `ActivityView` reads: graphics-engine, SM and any-tensor activity.
_VIEW_FIGURES = ((m.ACTIVITY, labels_of({"engine": m.ENGINE_GRAPHICS})),
                 (m.ACTIVITY, labels_of({"engine": m.ENGINE_SM})),
                 (m.PIPE_ACTIVITY, labels_of({"pipe": m.PIPE_TENSOR})))


def _pairs(link_slots: tuple[tuple[int, tuple[str, int], str, float], ...]
           ) -> tuple[tuple[tuple[str, int], int, int, float], ...] | None:
    """(link, transmit slot, receive slot, scale) of each link whose two directions are asked
    for (with one scale); None where some link has one direction only."""
    by_link: dict[tuple[str, int], dict[str, tuple[int, float]]] = {}
    for slot, link, direction, scale in link_slots:
        by_link.setdefault(link, {})[direction] = (slot, scale)
    pairs = []
    for link, directions in by_link.items():
        if set(directions) != {m.TRANSMIT, m.RECEIVE}:
            return None
        (tx, scale), (rx, rx_scale) = directions[m.TRANSMIT], directions[m.RECEIVE]
        if scale != rx_scale:
            return None
        pairs.append((link, tx, rx, scale))
    return tuple(pairs)


class _Request:
    """One `c_nvmlGpmMetricsGet_t` asking for a set of metrics, reused every cycle."""

    def __init__(self, metrics: tuple[GpmMetric, ...]) -> None:
        self.metrics = metrics
        self.struct = pynvml.c_nvmlGpmMetricsGet_t()
        self.struct.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        self.struct.numMetrics = len(metrics)
        for slot, metric in enumerate(metrics):
            self.struct.metrics[slot].metricId = metric.metric_id
        self._layout = struct.Struct("=" + _METRIC_ANSWER * len(metrics))
        # (slot, link, direction, scale) of each link rate asked for
        self.link_slots = tuple((slot, metric.link[:2], metric.link[2], metric.scale)
                                for slot, metric in enumerate(metrics) if metric.link)
        self.link_pairs = _pairs(self.link_slots)
        # the links measured both ways when every metric answers, and PCIe's two slots
        self.paired_links = frozenset(link for link, _, _, _ in self.link_pairs or ())
        self.pcie_pair = next(((tx, rx, scale) for link, tx, rx, scale in self.link_pairs or ()
                               if link == PCIE_LINK), None)
        # the name, scale and labels of each metric, in order
        self.names = tuple(metric.name for metric in metrics)
        self.scales = tuple(metric.scale for metric in metrics)
        self.labels = tuple(metric.labels for metric in metrics)
        # the values of the last answer of every metric, and their readings
        self.last: tuple[tuple[float, ...], tuple[Reading, ...]] = ((), ())
        # the slots of the figures the judgements read (exporter/activity.py), None if not asked
        self.view_slots = tuple(
            next((slot for slot, metric in enumerate(metrics)
                  if (metric.name, metric.labels) == wanted), None)
            for wanted in _VIEW_FIGURES)

    def statuses_and_values(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """NVML's status and value for each asked metric, in order, read straight from the
        struct's memory (its buffer)."""
        fields = self._layout.unpack_from(self.struct, _METRICS_AT)
        return fields[1::3], fields[2::3]


@dataclass
class _Source:
    """Where a device's samples come from: its own handle, or its GPU instance on the parent's."""

    handle: Any
    gpu_instance: int | None = None


class GpmActivity:
    """The GPM state of one device between cycles: its source, two samples, its request."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._source: _Source | None = None
        self._supported: bool | None = None
        self._previous: Any = None
        self._spare: Any = None
        self._request = _Request(GPM_METRICS)
        self._pruned = False
        self._suspended_until = 0.0
        self._slow_before = False  # whether the last GPM call was slow
        self._spinning = SpinningWindow()
        #: What GPM measured of the links this cycle; None when it measured none this cycle.
        self.link_rates: MeasuredLinks | None = None

    def read(self, nvml: DeviceCalls, handle: Any,
             utilization: float | None = None) -> list[Reading]:
        """This cycle's GPM readings of the device `handle` names (none on the first cycle).

        With the device's NVML `utilization` (0-1) of this cycle, the readings end with
        the spinning verdict (exporter/activity.py) once the window can tell.
        """
        self.link_rates = None
        if not self._measured(nvml, handle):
            return []
        readings, (graphics, sm, tensor) = self._readings()
        view = ActivityView(utilization=utilization, graphics=graphics, sm=sm, tensor=tensor)
        spinning = self._spinning.update(view, self._clock())
        if spinning is not None:
            readings.append(Reading(m.DEVICE_SPINNING, 1.0 if spinning else 0.0))
        return readings

    def _measured(self, nvml: DeviceCalls, handle: Any) -> bool:
        """Takes this cycle's sample; whether the metrics since the last one were answered."""
        if not self._ready(nvml, handle) or not self._request.metrics:
            return False  # no GPM, or none of the metrics asked for: nothing to sample for
        if self._clock() < self._suspended_until:
            nvml.cycle_errors[GPM_UNSUPPORTED] = "suspended: a GPM call was slow"
            self._forget_previous(nvml)  # values resume from a fresh sample, not this far back
            return False
        if self._spare is None:
            self._spare = nvml.call(pynvml.nvmlGpmSampleAlloc, every_cycle=True)
            if self._spare is None:
                return False
        if not self._timed(lambda: self._take(nvml, self._spare)):
            return False
        if self._previous is None:  # first sample: nothing to measure against yet
            self._previous, self._spare = self._spare, None
            return False
        request = self._request.struct
        # ctypes' own attribute setter: the binding's adds a str check, each cycle
        _set_field(request, "sample1", self._previous)
        _set_field(request, "sample2", self._spare)
        answered = self._timed(lambda: nvml.call(pynvml.nvmlGpmMetricsGet, request,
                                                 every_cycle=True))
        self._previous, self._spare = self._spare, self._previous
        return bool(answered)

    def _ready(self, nvml: DeviceCalls, handle: Any) -> bool:
        """Whether GPM can be asked for this device; works out its sample source once."""
        if self._supported is None:
            self._source = self._find_source(nvml, handle)
            if self._source is None:
                return False  # asked again next cycle: the failure was this cycle's
            support = nvml.call(pynvml.nvmlGpmQueryDeviceSupport, self._source.handle)
            if support is None:
                return False
            self._supported = bool(support.isSupportedDevice)
            if not self._supported:
                nvml.note_unsupported(GPM_UNSUPPORTED, NOT_SUPPORTED)
        return self._supported

    def _forget_previous(self, nvml: DeviceCalls) -> None:
        if self._previous is None:
            return
        if self._spare is None:
            self._spare = self._previous
        else:
            nvml.call(pynvml.nvmlGpmSampleFree, self._previous)
        self._previous = None

    @staticmethod
    def _find_source(nvml: DeviceCalls, handle: Any) -> _Source | None:
        is_mig = nvml.call(pynvml.nvmlDeviceIsMigDeviceHandle, handle)
        if is_mig is None:
            return None
        if not is_mig:
            return _Source(handle)
        parent = nvml.call(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle)
        gpu_instance = nvml.call(pynvml.nvmlDeviceGetGpuInstanceId, handle)
        if parent is None or gpu_instance is None:
            return None
        return _Source(parent, gpu_instance)

    def _take(self, nvml: DeviceCalls, sample: Any) -> bool:
        source = self._source
        assert source is not None
        if source.gpu_instance is None:
            taken = nvml.call(pynvml.nvmlGpmSampleGet, source.handle, sample, every_cycle=True)
        else:
            taken = nvml.call(pynvml.nvmlGpmMigSampleGet, source.handle, source.gpu_instance,
                              sample, every_cycle=True)
        return taken is not None

    def _timed(self, call: Callable[[], Any]) -> Any:
        """`call()`'s answer; a hung one, or a second slow one in a row, suspends GPM on the
        device for a while."""
        started = time.monotonic()
        answer = call()
        spent = time.monotonic() - started
        if spent > HUNG_CALL_S or (spent > SLOW_CALL_S and self._slow_before):
            self._suspended_until = self._clock() + SUSPEND_S
        self._slow_before = spent > SLOW_CALL_S
        return answer

    def _readings(self) -> tuple[list[Reading], list[float | None]]:
        """This cycle's readings, and the figures of them an `ActivityView` reads."""
        request = self._request
        statuses, values = request.statuses_and_values()
        success = pynvml.NVML_SUCCESS
        answered = statuses.count(success) == len(statuses)
        if answered and values == request.last[0]:  # an idle GPU's answer repeats
            readings = list(request.last[1])
        elif answered:  # the usual case: every metric answered (made in C loops: 50 a GPU)
            readings = list(map(Reading, request.names, map(mul, values, request.scales),
                                request.labels))
            request.last = (values, tuple(readings))
        else:
            readings = [Reading(name, value * scale, labels)
                        for name, scale, labels, status, value
                        in zip(request.names, request.scales, request.labels, statuses, values,
                               strict=True)
                        if status == success]
        figures = [None if slot is None or statuses[slot] != success
                   else values[slot] * request.scales[slot] for slot in request.view_slots]
        self.link_rates = self._rates(statuses, values, answered)
        if not self._pruned:
            # What a device does not offer (links it lacks, C2C off Grace) never appears later;
            # any other failure is this cycle's, and the metric is asked again.
            self._pruned = True
            kept = tuple(metric for metric, status in zip(request.metrics, statuses, strict=True)
                         if status != pynvml.NVML_ERROR_NOT_SUPPORTED)
            if len(kept) < len(request.metrics):
                self._request = _Request(kept)
        return readings, figures

    def _rates(self, statuses: tuple[int, ...], values: tuple[float, ...],
               answered: bool) -> MeasuredLinks:
        """What GPM measured of the links this cycle; a negative value (dropped later) is none."""
        request = self._request
        if answered and request.link_pairs is not None and (not values or min(values) >= 0):
            pcie = request.pcie_pair  # the usual case: every link measured both ways
            return MeasuredLinks(request.paired_links, None if pcie is None
                                 else (values[pcie[0]] * pcie[2], values[pcie[1]] * pcie[2]))
        rates: LinkRates = {}
        success = pynvml.NVML_SUCCESS
        for slot, link, direction, scale in request.link_slots:
            value = values[slot]
            if statuses[slot] == success and value >= 0:
                rates.setdefault(link, {})[direction] = value * scale
        return measured_links(rates)
