"""An NVIDIA device's recorded series -> its scenario keys, in NVML's units.

The inverse of the NVIDIA backend's probes: readings in base units go back to
what NVML answered (percent, mW, MHz, mJ, KiB per NVLink field 138/139...).
A series that was never read stays absent, so the replay answers NOT_SUPPORTED
where the node did.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pynvml

from .. import catalog as m
from ..backends.nvidia.fabric_health import HEALTH_FIELDS, STATES, SUMMARIES
from ..backends.nvidia.gpm import GPM_METRICS as BACKEND_GPM
from ..backends.nvidia.interconnect import _NVLINK_FIELDS, _PCIE_FIELDS, NVLINK, PCIE
from ..backends.nvidia.probes import THROTTLE_REASONS
from ..backends.nvidia.topology import P2P_STATUS, PCIE_LEVELS
from ..model import Device, Labels
from ..simulate.nvml_gpm import GPM_LINK_METRICS, GPM_METRICS
from .link_counters import filled_in
from .processes import put_processes
from .scenario_keys import (
    Row,
    energy_start,
    max_clocks,
    put,
    put_error_counts,
    put_gauges,
    put_last,
    scaled,
)
from .series import DeviceSeries, Points, label_map
from .timeline import counter_signal, gauge_signal, midpoints
from .vendors import VendorRecorder

MHZ = 1e6
GAUGES: tuple[Row, ...] = (
    (m.GPU_UTILIZATION, {"task": m.TASK_GENERAL}, "utilization_gpu_percent", 100),
    (m.MEMORY_BANDWIDTH_UTILIZATION, {}, "utilization_memory_percent", 100),
    (m.GPU_UTILIZATION, {"task": m.TASK_ENCODER}, "encoder_percent", 100),
    (m.GPU_UTILIZATION, {"task": m.TASK_DECODER}, "decoder_percent", 100),
    (m.MEMORY_USAGE, {}, "memory_used_bytes", 1),
    (m.POWER, {}, "power_mw", 1000),
    (m.TEMPERATURE, {"sensor": "gpu"}, "temperature_c", 1),
    (m.CLOCK_FREQUENCY, {"clock": m.CLOCK_SM}, "clock_sm_mhz", 1 / MHZ),
    (m.CLOCK_FREQUENCY, {"clock": m.CLOCK_MEMORY}, "clock_memory_mhz", 1 / MHZ),
    (m.PERFORMANCE_STATE, {}, "performance_state", 1),
)
STEP_KEYS = frozenset({"performance_state"})
FIXED: tuple[Row, ...] = (
    (m.MEMORY_LIMIT, {}, "memory_total_bytes", 1),
    (m.MEMORY_RESERVED, {}, "memory_reserved_bytes", 1),
    (m.POWER_LIMIT, {}, "power_limit_mw", 1000),
    *max_clocks("max_clock_sm_mhz", "max_clock_memory_mhz"),
)
ERROR_COUNTS = {m.ECC_CORRECTED: "ecc_corrected", m.ECC_UNCORRECTED: "ecc_uncorrected",
                m.PCIE_REPLAY: "pcie_replay"}
# What NVML answers for good where a device cannot do what was asked.
UNSUPPORTED = frozenset({"not_supported", "function_not_found"})
PROCESS_LISTS = "nvmlDeviceGetComputeRunningProcesses"
# The per-process utilization calls: a device with processes to list answers them (the
# replay cannot leave them out by a key), unless a rule says it does not.
PROCESS_SHARES = ("nvmlDeviceGetProcessUtilization", "nvmlDeviceGetProcessesUtilizationInfo")
_GPM_NAME_BY_ID = {number: name for name, number in GPM_METRICS.items()}
_TOPOLOGY_LEVELS = {text: level for level, text in PCIE_LEVELS.items()}
_P2P_NAMES = {text: name.removeprefix("NVML_P2P_STATUS_")
              for code, text in P2P_STATUS.items()
              for name in dir(pynvml)
              if name.startswith("NVML_P2P_STATUS_") and getattr(pynvml, name) == code}
_P2P_NAMES["chipset_not_supported"] = "CHIPSET_NOT_SUPPORTED"  # the binding misspells it
_LEVEL_NAMES = {pynvml.NVML_TOPOLOGY_INTERNAL: "INTERNAL", pynvml.NVML_TOPOLOGY_SINGLE: "SINGLE",
                pynvml.NVML_TOPOLOGY_MULTIPLE: "MULTIPLE",
                pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "HOSTBRIDGE",
                pynvml.NVML_TOPOLOGY_NODE: "NODE", pynvml.NVML_TOPOLOGY_SYSTEM: "SYSTEM"}


def _label_tuple(labels: Mapping[str, str] | Labels) -> Labels:
    """The backend's field labels as a series key's (given as a dict or already a tuple)."""
    return labels if isinstance(labels, tuple) else tuple(labels.items())


def mig_scenario(device: Device, series: DeviceSeries, interval_s: float) -> dict[str, Any]:
    """The `mig_devices` entry of one recorded MIG device (index "gpu/gi/ci")."""
    _, gpu_instance, compute_instance = device.index.split("/")
    out: dict[str, Any] = {"name": device.model, "uuid": device.uuid,
                           "gpu_instance_id": int(gpu_instance),
                           "compute_instance_id": int(compute_instance)}
    put_last(out, series, FIXED[:2])  # memory total and reserved
    put(out, "memory_used_bytes", gauge_signal(series.device(m.MEMORY_USAGE)))
    _gpm(out, series, interval_s)
    _processes(out, series)
    return out


def device_scenario(device: Device, series: DeviceSeries,
                    link_facts: Mapping[tuple[str, int], Mapping[str, str]],
                    interval_s: float, migs: list[dict[str, Any]] | None = None,
                    ) -> dict[str, Any]:
    """The scenario device object of one recorded physical NVIDIA GPU (with its MIG devices)."""
    out: dict[str, Any] = {"name": device.model, "uuid": device.uuid}
    facts = device.facts
    put(out, "serial", facts.get("serial") or None)
    put(out, "pci_bus_id", device.pci_bus_id or None)
    put(out, "architecture", facts.get("architecture") or None)
    if facts.get("numa_node", "").isdigit():
        out["numa_node"] = int(facts["numa_node"])
    if facts.get("cpu_affinity"):
        out["cpu_affinity"] = facts["cpu_affinity"].split(",")
    put_gauges(out, series, GAUGES, STEP_KEYS)
    put_last(out, series, FIXED)
    put_error_counts(out, series, ERROR_COUNTS)
    if "ecc_corrected" in out or "ecc_uncorrected" in out:
        out["ecc_mode"] = True
    put(out, "energy_start_mj", energy_start(series, 1000))
    _throttle(out, series)
    _memory_health(out, series)
    _gpm(out, series, interval_s)
    _links(out, series, link_facts, interval_s)
    _fabric(out, series)
    if migs:
        out["mig_mode"] = True
        out["mig_devices"] = migs
    elif series.up_times and not series.failed_with("nvmlDeviceGetMigMode", UNSUPPORTED):
        out["mig_mode"] = False  # read, and off (absent, the replay answers NOT_SUPPORTED)
    # NVML lists a MIG device's processes on its parent too: they are written once, on the MIG.
    _processes(out, series, {p["pid"] for mig in migs or () for p in mig.get("processes", ())})
    return out


def _processes(out: dict[str, Any], series: DeviceSeries, elsewhere: Collection[int] = ()
               ) -> None:
    """The device's `processes`, left out where NVML could not list them (as the replay then
    answers)."""
    if not series.failed_with(PROCESS_LISTS, UNSUPPORTED):
        put_processes(out, series, PROCESS_ENGINES, elsewhere)


def _throttle(out: dict[str, Any], series: DeviceSeries) -> None:
    masks: dict[float, int] = {}
    for bit, name in THROTTLE_REASONS:
        for t, value in series.device(m.THROTTLE_ACTIVE, reason=name):
            masks[t] = masks.get(t, 0) | (bit if value else 0)
    put(out, "clocks_event_reasons", gauge_signal(sorted(masks.items()), step=True))


def _memory_health(out: dict[str, Any], series: DeviceSeries) -> None:
    correctable = series.last(m.REMAPPED_ROWS, cause="correctable")
    if correctable is not None:
        out["remapped_rows"] = {
            "correctable": int(correctable),
            "uncorrectable": int(series.last(m.REMAPPED_ROWS, cause="uncorrectable") or 0),
            "pending": bool(series.last(m.ROW_REMAP_PENDING)),
            "failure": bool(series.last(m.ROW_REMAP_FAILURE)),
        }
    single = series.last(m.RETIRED_PAGES, cause="single_bit")
    if single is not None:
        out["retired_pages"] = {
            "single_bit": int(single),
            "double_bit": int(series.last(m.RETIRED_PAGES, cause="double_bit") or 0),
            "pending": bool(series.last(m.RETIRED_PAGES_PENDING)),
        }


def _gpm_name(metric_id: int) -> tuple[str, str | None]:
    """(scenario gpm key, link number or None) of an NVML GPM metric id."""
    if metric_id in _GPM_NAME_BY_ID:
        return _GPM_NAME_BY_ID[metric_id], None
    for name, (links, id_of) in GPM_LINK_METRICS.items():
        for link in range(links):
            if id_of(link) == metric_id:
                return name, str(link)
    raise KeyError(metric_id)


def _gpm(out: dict[str, Any], series: DeviceSeries, interval_s: float) -> None:
    # A GPM value averages the interval before its sample: it stands for the middle of it.
    gpm: dict[str, Any] = {}
    for metric in BACKEND_GPM:
        points = series.points.get(("d", metric.name, metric.labels))
        if not points:
            continue
        name, link = _gpm_name(metric.metric_id)
        signal = gauge_signal(midpoints(scaled(points, 1 / metric.scale), interval_s))
        if link is None:
            gpm[name] = signal
        else:
            gpm.setdefault(name, {})[link] = signal
    if gpm:
        out["gpm"] = gpm


# GPM's measure of each link byte counter's rate: (link type, link, direction) -> its metric
_GPM_RATE_OF = {metric.link: metric for metric in BACKEND_GPM if metric.link is not None}


def _counter_reads(series: DeviceSeries, link_type: str, index: int, metric: str,
                   labels: Labels, interval_s: float, wrap: int | None = None) -> Points:
    """A link counter's recorded reads; byte counters read only when due (a GPU whose GPM
    measures the links) filled in between reads from GPM's rates (link_counters.py)."""
    points = series.points.get(("l", link_type, index, metric, labels)) or []
    direction = dict(labels).get("direction")
    gpm = _GPM_RATE_OF.get((link_type, index, direction)) if metric == m.LINK_IO else None
    rates = series.points.get(("d", gpm.name, gpm.labels)) if gpm is not None else None
    return filled_in(points, rates, interval_s, wrap) if points and rates else points


def _links(out: dict[str, Any], series: DeviceSeries,
           link_facts: Mapping[tuple[str, int], Mapping[str, str]], interval_s: float) -> None:
    nvlinks = sorted(index for link_type, index in link_facts if link_type == NVLINK)
    if nvlinks:
        out["nvlinks"] = [_nvlink(index, link_facts[(NVLINK, index)], series)
                          for index in range(max(nvlinks) + 1)]
    fields: dict[str, Any] = {}
    for field_id, metric, labels, scale in _NVLINK_FIELDS:
        for index in nvlinks:
            points = _counter_reads(series, NVLINK, index, metric, _label_tuple(labels),
                                    interval_s)
            if points:
                fields.setdefault(str(field_id), {})[str(index)] = counter_signal(
                    points, scale=1 / scale)
    for field_id, metric, labels, _ in _PCIE_FIELDS:
        points = _counter_reads(series, PCIE, 0, metric, _label_tuple(labels), interval_s,
                                wrap=2**32)
        # one read says nothing of how the counter moves: a GPU without GPM exports no more
        # at 1 s, where nothing tells the counters' wraps (docs/backends.md)
        if len(points) >= 2:
            fields[str(field_id)] = {"type": "uint", "value": counter_signal(points, wrap=2**32)}
    if fields:
        out["fields"] = fields
    put(out, "pcie_link", series.pcie_link())


def _nvlink(index: int, facts: Mapping[str, str], series: DeviceSeries) -> dict[str, Any]:
    up = series.points.get(("l", NVLINK, index, m.LINK_UP, ()))
    link: dict[str, Any] = {"state": bool(up[-1][1]) if up else False}
    if facts.get("version", "").isdigit():
        link["version"] = int(facts["version"])
    if facts.get("remote_type"):
        link["remote_device_type"] = facts["remote_type"]
    if facts.get("remote_pci_bus_id"):
        link["remote_pci_bus_id"] = facts["remote_pci_bus_id"]
    return link


def _code_name(names: Mapping[str, int], code: float) -> str:
    return next((n.upper() for n, v in names.items() if v == int(code)), str(int(code)))


def _fabric(out: dict[str, Any], series: DeviceSeries) -> None:
    info = next((label_map(k) for k, _ in series.matching("d", m.FABRIC_INFO)), None)
    if info is None:
        return
    fabric: dict[str, Any] = {"cluster_uuid": info["cluster_uuid"],
                              "clique_id": int(info["clique_id"])}
    named: tuple[tuple[str, str, Callable[[float], Any]], ...] = (
        ("state", m.FABRIC_STATE, lambda c: _code_name(STATES, c)),
        ("status", m.FABRIC_STATUS, int),
        ("health_summary", m.FABRIC_HEALTH_SUMMARY, lambda c: _code_name(SUMMARIES, c)),
    )
    for key, metric, name_of in named:
        points = series.device(metric)
        if points:
            fabric[key] = _step_of_names([(t, name_of(v)) for t, v in points])
    masks: dict[float, int] = {}
    for health in HEALTH_FIELDS:
        for t, value in series.device(m.FABRIC_HEALTH_ISSUE, field=health.issue):
            codes = health.trouble if value else health.fine
            masks[t] = masks.get(t, 0) | (min(codes) << health.shift)
    if masks:
        fabric["health_mask"] = gauge_signal(sorted(masks.items()), step=True)
    out["fabric"] = fabric


def _step_of_names(points: list[tuple[float, Any]]) -> Any:
    """A step signal of names (fabric states): one keyframe per change."""
    frames = [points[0]] + [p for prev, p in itertools.pairwise(points)
                            if p[1] != prev[1]]
    if len(frames) == 1:
        return frames[0][1]
    return {"keyframes": [[round(t, 3), v] for t, v in frames], "interpolate": "step"}


PROCESS_ENGINES = ((m.ENGINE_SM, "sm_percent"), (m.ENGINE_MEMORY, "memory_percent"),
                   (m.ENGINE_ENCODER, "encoder_percent"), (m.ENGINE_DECODER, "decoder_percent"))


def topology_of(device: Device, numa: Mapping[str, int | None]) -> dict[str, Any]:
    """The device's `topology` and `p2p` keys from its peers (NVLink peers by NUMA node)."""
    topology: dict[str, str] = {}
    p2p: dict[str, Any] = {}
    for peer in device.peers:
        if peer.connection.startswith("NV"):
            same = numa.get(device.uuid) is not None and numa.get(device.uuid) == numa.get(
                peer.uuid)
            topology[peer.index] = "NODE" if same else "SYSTEM"
        elif peer.connection in _TOPOLOGY_LEVELS:
            topology[peer.index] = _LEVEL_NAMES[_TOPOLOGY_LEVELS[peer.connection]]
        if peer.p2p and peer.p2p != "OK" and peer.p2p in _P2P_NAMES:
            p2p[peer.index] = {"read": _P2P_NAMES[peer.p2p]}
    keys: dict[str, Any] = {}
    if topology:
        keys["topology"] = topology
    if p2p:
        keys["p2p"] = p2p
    return keys


def top_level(facts: Mapping[str, str]) -> dict[str, Any]:
    """The scenario's driver, NVML and CUDA driver versions, where NVML gave them."""
    keys: dict[str, Any] = {k: facts[k] for k in ("driver_version", "nvml_version")
                            if facts.get(k)}
    if str(facts.get("cuda_driver_version", "")).isdigit():
        keys["cuda_driver_version"] = int(facts["cuda_driver_version"])
    return keys


def _mig_child(device: Device, series: DeviceSeries, interval_s: float) -> dict[str, Any]:
    return mig_scenario(device, series, interval_s)


# Which call hung is not in the samples: the replay hangs the device's sampling calls
# (not its discovery, which had answered), whichever of them the agent makes first.
HUNG_CALLS = ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
              "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo",
              "nvmlDeviceGetFieldValues")

RECORDER = VendorRecorder(
    vendor="nvidia", device=device_scenario, child=_mig_child, peers=topology_of,
    top_level=top_level, call_prefix="nvml", absent_kinds=UNSUPPORTED | {"gpu_is_lost"},
    hung_calls=HUNG_CALLS, lost_kinds=frozenset({"gpu_is_lost"}),
    unkeyed_calls=frozenset(PROCESS_SHARES))
