"""Suspected hung collectives, from the device side.

A collective (all-reduce, all-gather, a send/recv pair) that hangs keeps its
kernels spinning on the device, waiting for peers that never answer: the
device stays busy while its interconnect byte counters stop moving. The
detector watches every device's utilization and the rates of its peer links
(NVLink, XGMI; the PCIe host link on devices without any) and calls a device
suspected once that pattern has held for a whole window. A busy device that
moves data, or an idle one, is not suspected. Where the backend reads the byte
counters on a schedule (it exports their age: NVIDIA, which reads them less often
where GPM measures the links each cycle), the rates are the device's own
measurement of the cycle where it has one. Where the device measures engine
activity (GPM), one whose SMs or tensor pipes really work is not suspected either:
a compute-bound worker that does not communicate keeps its links flat too, but
a hung collective's spinning kernel leaves the SMs nearly idle
(exporter/activity.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import catalog as m
from .activity import activity_of
from .model import DeviceSample

PCIE = m.LINK_PCIE
NVLINK = m.LINK_NVLINK
DEFAULT_WINDOW_S = 30.0
DEFAULT_BUSY_UTILIZATION = 0.8
DEFAULT_FLAT_BYTES_PER_S = 1024.0 * 1024.0


@dataclass(frozen=True)
class CollectiveStallSettings:
    """When a device counts as spinning on a hung collective."""

    window_s: float = DEFAULT_WINDOW_S
    busy_utilization: float = DEFAULT_BUSY_UTILIZATION
    flat_bytes_per_s: float = DEFAULT_FLAT_BYTES_PER_S


def _measured_rate(sample: DeviceSample) -> float | None:
    """Bytes/s the device measured this cycle over its NVLinks, else its PCIe link (GPM),
    where its backend reads the byte counters on a schedule; None otherwise."""
    nvlink = pcie = None
    scheduled = False
    for r in sample.readings:
        metric = r.metric
        if metric == m.LINK_THROUGHPUT and ("link_type", NVLINK) in r.labels:
            nvlink = (nvlink or 0.0) + r.value
        elif metric == m.PCIE_THROUGHPUT:
            pcie = (pcie or 0.0) + r.value
        elif metric == m.LINK_COUNTERS_AGE:
            scheduled = True
    if not scheduled or m.LINK_THROUGHPUT in sample.errors or m.PCIE_THROUGHPUT in sample.errors:
        return None  # not measured, or some of it dropped as impossible: the counters then
    return nvlink if nvlink is not None else pcie


def interconnect_rate(sample: DeviceSample) -> float | None:
    """Bytes/s over the device's peer links (NVLink, XGMI), else its PCIe link; None unknown.

    Measured by the device this cycle where it does (GPM), else from its byte counters."""
    measured = _measured_rate(sample)
    if measured is not None:
        return measured
    peer = [link for link in sample.links if link.link_type != PCIE and link.rates]
    links = peer or [link for link in sample.links if link.link_type == PCIE and link.rates]
    if not links:
        return None
    return sum(rate for link in links for rate in link.rates.values())


class CollectiveStallDetector:
    """Keeps, per device, since when it has been busy with flat interconnect counters."""

    def __init__(self, settings: CollectiveStallSettings | None = None) -> None:
        self.settings = settings or CollectiveStallSettings()
        self._since: dict[str, float] = {}

    def update(self, samples: Iterable[DeviceSample]) -> dict[str, bool]:
        """device uuid -> suspected, for every device with a verdict this cycle.

        Devices that are down, or report no utilization or no link rates, get no
        verdict (their series is absent) and start over.
        """
        settings = self.settings
        verdicts: dict[str, bool] = {}
        seen = set()
        for sample in samples:
            uuid = sample.device.uuid
            seen.add(uuid)
            view = activity_of(sample) if sample.up else None
            rate = interconnect_rate(sample) if view is not None else None
            if view is None or view.utilization is None or rate is None:
                self._since.pop(uuid, None)
                continue
            spinning = (view.utilization >= settings.busy_utilization
                        and rate <= settings.flat_bytes_per_s and not view.computing)
            if spinning:
                since = self._since.setdefault(uuid, sample.taken_at)
                verdicts[uuid] = sample.taken_at - since >= settings.window_s
            else:
                self._since.pop(uuid, None)
                verdicts[uuid] = False
        for gone in set(self._since) - seen:
            del self._since[gone]
        return verdicts
