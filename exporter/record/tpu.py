"""A TPU host's recorded series -> the scenario's `tpu` section, in libtpu's units.

Per chip: its PCI bus id, NUMA node, HBM total and in use (bytes), duty cycle,
HBM bandwidth and (from the GKE device plugin) tensor-core utilization
(percent). For the host: the chips' PCI device id (from their model), the
slice facts Ray's TPU labels come from, whether the device plugin was read,
and each latency distribution as the p50 the backend reported: `latency_us`
puts 90 % of a distribution's observations in that value's bucket, so the
replay reports the same percentiles; libtpu's observation counts are not
read, and percentiles do not depend on them, so each distribution counts one
observation a second. A metric libtpu did not serve (NOT_FOUND, UNIMPLEMENTED,
INVALID_ARGUMENT) is in `unsupported_metrics`; one that failed otherwise for a
run of cycles, and the service not answering at all (UNAVAILABLE), are
`errors` rules over that window; one that ran past the backend's deadline a
`delays` rule (libtpu answering late). Processes (whoever holds a chip's device
file) are not part of the section.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import catalog as m
from ..backends.tpu.chips import _GENERATIONS
from ..model import Device
from ..simulate.tpu_scenario import STATUSES
from .events import failure_windows
from .scenario_keys import Row, put_gauges, put_last
from .series import DeviceSeries
from .timeline import gauge_signal
from .vendors import LinkFacts, Numa, VendorRecorder

SECTION = "tpu"
GAUGES: tuple[Row, ...] = (
    (m.MEMORY_USAGE, {}, "hbm_used_bytes", 1),
    (m.GPU_UTILIZATION, {"task": m.TASK_GENERAL}, "duty_cycle_percent", 100),
    (m.MEMORY_BANDWIDTH_UTILIZATION, {}, "hbm_bandwidth_percent", 100),
    (m.TENSORCORE_UTILIZATION, {}, "tensorcore_utilization_percent", 100),
)
FIXED: tuple[Row, ...] = ((m.MEMORY_LIMIT, {}, "hbm_total_bytes", 1),)
# the section's latency keys by the series the backend exports them as
LATENCIES: tuple[tuple[str, dict[str, str], str], ...] = (
    (m.COLLECTIVE_LATENCY, {"quantile": "0.5"}, "collective_e2e"),
    (m.TRANSFER_LATENCY, {"path": "dcn_outbound", "quantile": "0.5"}, "dcn_outbound"),
    (m.TRANSFER_LATENCY, {"path": "dcn_inbound", "quantile": "0.5"}, "dcn_inbound"),
    (m.TRANSFER_LATENCY, {"path": "host_to_device", "quantile": "0.5"}, "host_to_device"),
    (m.TRANSFER_LATENCY, {"path": "device_to_host", "quantile": "0.5"}, "device_to_host"),
)
# device fact -> section key (the slice Ray's TPU node labels describe)
SLICE_FACTS = (("accelerator_type", "accelerator_type"), ("tpu_slice_name", "slice_name"),
               ("tpu_topology", "topology"))
COUNTED_PER_S = 1  # observations a recorded distribution counts (see the module docstring)
# A percentile is interpolated within its (doubling) bucket from one interval's few
# observations: it wanders by some percent from cycle to cycle; keyframes follow 5 %.
LATENCY_TOLERANCE = 0.05
# the TPU backend's name for its runtime call (backends/tpu/runtime.py's FUNCTION, not
# imported: that module loads grpc)
FUNCTION = "GetRuntimeMetric"
# chip model -> the PCI device id sysfs gives it (the simulated chips' `pci_device_id`; v2
# and v3 also need a subsystem id, which the section does not set)
PCI_DEVICE_IDS = {model: device_id for device_id, (_, model) in _GENERATIONS.items()
                  if "/" not in device_id}
# the failure kinds of a metric this libtpu does not serve (backends/tpu/runtime.py)
UNSERVED = frozenset({"not_found", "unimplemented", "invalid_argument"})
ALL_METRICS = "*"  # an error rule's metric for every metric: the service itself failed
TIMED_OUT = "deadline_exceeded"  # the backend's deadline passed before libtpu answered
# how late a replayed hung call answers: past the backend's 2 s deadline (runtime.py's
# CALL_TIMEOUT_S), so that it times out as on the node, and soon enough to leave the fake's
# server threads free
LATE_ANSWER_S = 3.0


def chip_scenario(device: Device, series: DeviceSeries, link_facts: LinkFacts,
                  interval_s: float, children: list[dict[str, Any]]) -> dict[str, Any]:
    """The `tpu.chips` entry of one recorded chip."""
    out: dict[str, Any] = {"pci_bus_id": device.pci_bus_id}
    if device.facts.get("numa_node", "").isdigit():
        out["numa_node"] = int(device.facts["numa_node"])
    put_last(out, series, FIXED)
    put_gauges(out, series, GAUGES)
    return out


def host_keys(devices: Sequence[Device], series: Sequence[DeviceSeries],
              facts: Mapping[str, str],
              children: Mapping[str, Sequence[tuple[Device, DeviceSeries]]],
              interval_s: float) -> dict[str, Any]:
    """The section's host keys: slice facts, device files, device plugin, latencies, the
    metrics not served and the runtime calls' failures."""
    first = devices[0].facts
    keys: dict[str, Any] = {key: first[fact] for fact, key in SLICE_FACTS if first.get(fact)}
    if first.get("tpu_worker_id", "").isdigit():
        keys["worker_id"] = int(first["tpu_worker_id"])
    device_file = first.get("device_file", "")
    keys["device_files"] = "accel" if os.path.basename(device_file).startswith("accel") \
        else "vfio"
    keys["device_plugin"] = bool(facts.get("device_plugin"))
    if devices[0].model in PCI_DEVICE_IDS:  # else the section's default (v5e)
        keys["pci_device_id"] = PCI_DEVICE_IDS[devices[0].model]
    latencies = {}
    for metric, labels, key in LATENCIES:
        points = series[0].device(metric, **labels)
        if points:
            latencies[key] = {"count": {"rate_per_s": COUNTED_PER_S},
                              "latency_us": gauge_signal([(t, v * 1e6) for t, v in points],
                                                         relative=LATENCY_TOLERANCE)}
    if latencies:
        keys["latencies"] = latencies
    keys.update(_failures(series[0], interval_s))
    return keys


def _metric_of(call: str) -> str:
    """The metric a runtime call's error names: "GetRuntimeMetric[name]" -> name, and the
    service as a whole ("GetRuntimeMetric") -> every metric."""
    return call[len(FUNCTION) + 1:-1] if call.startswith(f"{FUNCTION}[") else ALL_METRICS


def _status(kind: str) -> str:
    """A failure kind as a status the section's rules take (a transient one it lacks, such
    as CANCELLED: UNKNOWN, scoped the same)."""
    return kind.upper() if kind.upper() in STATUSES else "UNKNOWN"


def _failures(series: DeviceSeries, interval_s: float) -> dict[str, Any]:
    """`unsupported_metrics`, `errors` and `delays` from the runtime calls' errors (every
    chip's samples carry the same: one call answers for all). A call that ran past the
    backend's deadline is a libtpu that did not answer in time: a delay, so that the
    replay's call waits out its deadline too."""
    unserved = sorted({_metric_of(call) for _, errors in series.errors
                       for call, kind in errors.items()
                       if call.startswith(f"{FUNCTION}[") and kind in UNSERVED})
    windows = failure_windows(
        series, interval_s,
        lambda call, kind: call.startswith(FUNCTION) and kind not in UNSERVED, _metric_of)
    keys: dict[str, Any] = {}
    if unserved:
        keys["unsupported_metrics"] = unserved
    errors = [{"metric": metric, "status": _status(kind), "from_s": start, "until_s": until}
              for metric, kind, start, until in windows if kind != TIMED_OUT]
    delays = [{"metric": metric, "seconds": LATE_ANSWER_S, "from_s": start, "until_s": until}
              for metric, kind, start, until in windows if kind == TIMED_OUT]
    if errors:
        keys["errors"] = errors
    if delays:
        keys["delays"] = delays
    return keys


def no_children(device: Device, series: DeviceSeries, interval_s: float) -> dict[str, Any]:
    raise TypeError(f"a TPU chip has no child devices: {device.uuid}")


def no_peer_keys(device: Device, numa: Numa) -> dict[str, Any]:
    """The section has no topology keys."""
    return {}


def no_versions(facts: Mapping[str, str]) -> dict[str, Any]:
    return {}


RECORDER = VendorRecorder(
    vendor="google", device=chip_scenario, child=no_children, peers=no_peer_keys,
    top_level=no_versions, call_prefix="", absent_kinds=frozenset(), hung_calls=(),
    section=SECTION, devices_key="chips", host_keys=host_keys, records_errors=False,
    lost_kinds=frozenset({"not_found"}))  # its device file gone
