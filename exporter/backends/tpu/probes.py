"""What one cycle reads for all chips at once, one probe per concern.

libtpu answers each metric for every chip of its process in one response, so a
cycle's readout is fetched once and shared by the chips' samples. Chip numbers
in the answers (``device-id``) are this host's chip indices when they fit; else
(slice-wide numbers) the k-th smallest is the k-th chip, as for the device plugin.

The mapping to catalog metrics is in `_GAUGES`, `_PLUGIN` and docs/backends.md (TPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ... import catalog as m
from ...model import Reading
from ..calls import reading
from . import proto
from .device_plugin import PluginReadout
from .latency import LatencyWindow
from .runtime import RuntimeCalls, device_id, gauge_value

PERCENT = 0.01


@dataclass
class Readout:
    """One cycle's values: per host chip index, plus those shared by all chips."""

    chips: dict[int, list[Reading]] = field(default_factory=dict)
    shared: list[Reading] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    source: str = "none"  # "runtime", "device_plugin" or "none"
    silent: str = ""  # why no chip can be read this cycle (every runtime metric failed)

    def add(self, chip: int, item: Reading) -> None:
        """Add a reading of one chip unless the chip already has this metric and labels."""
        present = self.chips.setdefault(chip, [])
        if not any(r.metric == item.metric and r.labels == item.labels for r in present):
            present.append(item)


def chip_map(ids: Iterable[int], chip_count: int) -> dict[int, int]:
    """Reported chip number -> host chip index (see the module docstring)."""
    found = sorted(set(ids))
    if all(0 <= i < chip_count for i in found):
        return {i: i for i in found}
    if len(found) == chip_count:
        return dict(zip(found, range(chip_count), strict=True))
    return {}  # numbers that cannot be placed on this host's chips


# runtime metric -> (catalog metric, labels, scale)
_GAUGES: tuple[tuple[str, str, dict[str, str], float], ...] = (
    (proto.HBM_USAGE, m.MEMORY_USAGE, {}, 1.0),
    (proto.HBM_TOTAL, m.MEMORY_LIMIT, {}, 1.0),
    (proto.DUTY_CYCLE, m.GPU_UTILIZATION, {"task": m.TASK_GENERAL}, PERCENT),
    (proto.HBM_BANDWIDTH, m.MEMORY_BANDWIDTH_UTILIZATION, {}, PERCENT),
)
# device plugin metric -> (catalog metric, labels, scale)
_PLUGIN: tuple[tuple[str, str, dict[str, str], float], ...] = (
    ("memory_used", m.MEMORY_USAGE, {}, 1.0),
    ("memory_total", m.MEMORY_LIMIT, {}, 1.0),
    ("duty_cycle", m.GPU_UTILIZATION, {"task": m.TASK_GENERAL}, PERCENT),
    ("memory_bandwidth_utilization", m.MEMORY_BANDWIDTH_UTILIZATION, {}, PERCENT),
    ("tensorcore_utilization", m.TENSORCORE_UTILIZATION, {}, PERCENT),
)


def runtime_gauges(calls: RuntimeCalls, readout: Readout, chip_count: int) -> None:
    """Per-chip gauges from the runtime service (raises ServiceDown)."""
    for name, metric, labels, scale in _GAUGES:
        entries = calls.metric(name)
        if not entries:
            continue
        values = [(device_id(e), gauge_value(e)) for e in entries]
        placed = chip_map((i for i, v in values if i is not None and v is not None), chip_count)
        if not placed and values:
            readout.errors[f"{name}[device-id]"] = "unmapped"
        for number, value in values:
            # a value that cannot be true goes on too, for the reading checks to refuse
            if number in placed and value is not None:
                readout.add(placed[number], reading(metric, value * scale, **labels))


def runtime_latencies(calls: RuntimeCalls, readout: Readout,
                      windows: dict[str, LatencyWindow]) -> None:
    """Collective and transfer latency percentiles (raises ServiceDown)."""
    for name in proto.DISTRIBUTIONS:
        entries = calls.metric(name)
        if not entries:
            continue
        distributions = [e.distribution for e in entries
                         if e.WhichOneof("measure") == "distribution"]
        found = windows.setdefault(name, LatencyWindow()).percentiles(distributions)
        path = proto.TRANSFER_PATHS.get(name)
        for q, seconds in sorted(found.items()):
            if path is None:
                readout.shared.append(reading(m.COLLECTIVE_LATENCY, seconds, quantile=f"{q:g}"))
            else:
                readout.shared.append(reading(m.TRANSFER_LATENCY, seconds, path=path,
                                              quantile=f"{q:g}"))


def plugin_values(plugin: PluginReadout, readout: Readout) -> None:
    """Per-chip values from the device plugin, for what the runtime service did not give."""
    for chip, values in plugin.chips.items():
        for name, metric, labels, scale in _PLUGIN:
            value = values.get(name)
            if value is not None:
                readout.add(chip, reading(metric, value * scale, **labels))


def chip_readings(readout: Readout, index: int) -> Sequence[Reading]:
    """Everything the readout has for one chip."""
    return (*readout.chips.get(index, ()), *readout.shared)


def errors_of(calls: RuntimeCalls, extra: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """The functions whose values are missing this cycle, with their kind."""
    yield from calls.unsupported.items()
    yield from calls.cycle_errors.items()
    yield from extra.items()
