"""Turns one agent's snapshot document into the compact per-node view.

The agent serves this view as its summary (`sinks/summary.py`) and the head's
collector keeps it for every node, so both reduce a snapshot the same way.

An agent's `/api/v1/snapshot` carries every reading with its labels (about
100 KB for an 8-GPU node). The head keeps only what its views show, with plain
field names and base units, so a thousand nodes fit in memory and every view
is a cheap walk over small dicts. A value the device did not report stays
None (shown as absent, never as zero).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from . import catalog as m
from .attribution.join import WHOLE
from .field_record import FieldRecord
from .node_transfers import from_snapshot, from_summary
from .shared_values import share, share_fact
from .summary_shape import check_device

# Throttle reasons that mean trouble (slowdowns), as opposed to idle, app clocks or the
# power cap a busy device runs at.
HARMFUL_THROTTLE_REASONS = frozenset({*m.THERMAL_THROTTLE_REASONS,
                                      m.REASON_HW_POWER_BRAKE_SLOWDOWN})


def value(values: Mapping[str, list[dict[str, Any]]], metric: str,
          **labels: str) -> float | None:
    """The value of `metric` whose labels include `labels`, or None."""
    for entry in values.get(metric) or ():
        if labels:
            entry_labels = entry.get("labels") or {}
            if any(entry_labels.get(k) != v for k, v in labels.items()):
                continue
        return _number(entry.get("value"))
    return None


# The sensor a device's temperature is read from: the die's ("gpu": NVIDIA, Gaudi), else an
# AMD GPU's edge, else its hotspot (MI300 and later report no edge temperature).
DEVICE_TEMPERATURE_SENSORS = ("gpu", "edge", "hotspot")


def _temperature(values: Mapping[str, list[dict[str, Any]]]) -> tuple[float | None, str]:
    """The device's temperature from the first of DEVICE_TEMPERATURE_SENSORS it reports, and
    that sensor's name (None and "" where it reports none)."""
    for sensor in DEVICE_TEMPERATURE_SENSORS:
        found = value(values, m.TEMPERATURE, sensor=sensor)
        if found is not None:
            return found, sensor
    return None, ""


def _number(number: Any) -> float | None:
    if number.__class__ is float:  # nearly every value: the checks below cost more
        return number if math.isfinite(number) else None
    if isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number):
        return float(number)
    return None


def _flag(flag: Any) -> bool | None:
    return flag if isinstance(flag, bool) else None


def by_label(values: Mapping[str, list[dict[str, Any]]], metric: str,
             label: str) -> dict[str, float]:
    """label value -> value, for every entry of `metric`."""
    found = {}
    for entry in values.get(metric) or ():
        key = (entry.get("labels") or {}).get(label)
        number = _number(entry.get("value"))
        if key is not None and number is not None:
            found[str(key)] = number
    return found


def _identity(doc: Mapping[str, Any]) -> dict[str, Any]:
    found = {key: doc.get(key, "") for key in m.RAY_LABELS}
    found["pid"] = int(doc.get("pid") or 0)
    return found


def _holder(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A Ray worker holding the device: its share, and the agent's verdict on its use
    (`idle_rule`: which signal judged it; `shared`: it holds a fraction of the device)."""
    fraction = float(doc.get("fraction") or 0.0)
    return {**_identity(doc), "fraction": fraction, "idle": bool(doc.get("idle")),
            "spinning": bool(doc.get("spinning")), "idle_rule": str(doc.get("idle_rule", "")),
            "shared": bool(doc.get("shared", fraction < WHOLE))}


def link_up(doc: Mapping[str, Any]) -> bool | None:
    """Whether a link (of a snapshot document's device) is up; None where not reported."""
    up = value(doc.get("values") or {}, m.LINK_UP)
    return None if up is None else up >= 1


def _link(doc: Mapping[str, Any]) -> dict[str, Any]:
    values = doc.get("values") or {}
    facts = doc.get("facts") or {}
    rates = doc.get("rates_bytes_per_s") or {}
    errors = by_label(values, m.LINK_ERRORS, "error_type")
    return {
        "link_type": str(doc.get("link_type", "")),
        "index": int(doc.get("index") or 0),
        "up": link_up(doc),
        "transmit_bytes_per_s": _number(rates.get(m.TRANSMIT)),
        "receive_bytes_per_s": _number(rates.get(m.RECEIVE)),
        "version": facts.get("version", ""),
        "remote_type": facts.get("remote_type", ""),
        "peer_uuid": facts.get("peer_uuid", ""),
        "errors": sum(errors.values()) if errors else None,
    }


def _process(doc: Mapping[str, Any]) -> dict[str, Any]:
    values = doc.get("values") or {}
    return {
        **_identity(doc),
        "memory_bytes": value(values, m.PROCESS_MEMORY_USAGE),
        "sm_utilization": value(values, m.PROCESS_UTILIZATION, engine=m.ENGINE_SM),
    }


def _fabric(values: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The GPU's NVLink fabric (codes, names, issues in trouble); None without a fabric."""
    state = value(values, m.FABRIC_STATE)
    if state is None:
        return None
    names = next(((entry.get("labels") or {}) for entry in values.get(m.FABRIC_INFO) or ()), {})
    issues = by_label(values, m.FABRIC_HEALTH_ISSUE, "field")
    return {
        "state": state,
        "status": value(values, m.FABRIC_STATUS),
        "health_summary": value(values, m.FABRIC_HEALTH_SUMMARY),
        "issues": sorted(field for field, flag in issues.items() if flag >= 1),
        **{f"{key}_name": str(names.get(key, "")) for key in ("state", "status", "health_summary")},
        "incorrect_configuration": str(names.get("incorrect_configuration", "")),
        "cluster_uuid": str(names.get("cluster_uuid", "")),
        "clique_id": str(names.get("clique_id", "")),
    }


def _device(doc: Mapping[str, Any]) -> dict[str, Any]:
    values = doc.get("values") or {}
    facts = doc.get("facts") or {}
    throttle = by_label(values, m.THROTTLE_ACTIVE, "reason")
    errors = by_label(values, m.HW_ERRORS, "error_type")
    xid = by_label(values, m.XID_ERRORS, "xid")
    holders = [_holder(h) for h in doc.get("holders") or ()]
    temperature, sensor = _temperature(values)
    return {
        "uuid": str(doc.get("uuid", "")),
        "index": str(doc.get("index", "")),
        "vendor": str(doc.get("vendor", "")),
        "model": str(doc.get("model", "")),
        "pci_bus_id": str(doc.get("pci_bus_id", "")),
        "parent_uuid": str(doc.get("parent_uuid", "")),
        "up": bool(doc.get("up")),
        "stale": bool(doc.get("stale")),
        "age_s": _number(doc.get("age_s")),
        "facts": {str(k): str(v) for k, v in (doc.get("facts") or {}).items()},
        "nvlink_domain": str(facts.get("nvlink_domain", "")),
        "peers": [{"uuid": p.get("uuid", ""), "index": str(p.get("index", "")),
                   "connection": p.get("connection", ""), "p2p": p.get("p2p", "")}
                  for p in doc.get("peers") or ()],
        "utilization": value(values, m.GPU_UTILIZATION, task=m.TASK_GENERAL),
        "memory_bandwidth_utilization": value(values, m.MEMORY_BANDWIDTH_UTILIZATION),
        "activity": by_label(values, m.ACTIVITY, "engine"),
        "pipe_activity": by_label(values, m.PIPE_ACTIVITY, "pipe"),
        "memory_used_bytes": value(values, m.MEMORY_USAGE),
        "memory_reserved_bytes": value(values, m.MEMORY_RESERVED),
        "spinning": value(values, m.DEVICE_SPINNING),
        # busy with flat interconnect counters and no real compute for the window
        "collective_suspected_stall": _flag(doc.get("collective_suspected_stall")),
        "memory_total_bytes": value(values, m.MEMORY_LIMIT),
        "power_watts": value(values, m.POWER),
        "power_limit_watts": value(values, m.POWER_LIMIT),
        "temperature_celsius": temperature,
        "temperature_sensor": sensor,
        "sm_clock_hz": value(values, m.CLOCK_FREQUENCY, clock=m.CLOCK_SM),
        "sm_clock_max_hz": value(values, m.CLOCK_MAX_FREQUENCY, clock=m.CLOCK_SM),
        "throttle_reasons": sorted(r for r, v in throttle.items() if v >= 1),
        "pcie": {
            "generation": value(values, m.PCIE_GENERATION, state=m.PCIE_CURRENT),
            "generation_max": value(values, m.PCIE_GENERATION, state=m.PCIE_MAX),
            "width": value(values, m.PCIE_WIDTH, state=m.PCIE_CURRENT),
            "width_max": value(values, m.PCIE_WIDTH, state=m.PCIE_MAX),
        },
        "ecc_corrected": errors.get(m.ECC_CORRECTED),
        "ecc_uncorrected": errors.get(m.ECC_UNCORRECTED),
        "pcie_replays": errors.get(m.PCIE_REPLAY),
        "row_remap_pending": value(values, m.ROW_REMAP_PENDING),
        "row_remap_failure": value(values, m.ROW_REMAP_FAILURE),
        "xid_errors": {code: count for code, count in xid.items() if count > 0},
        "fabric": _fabric(values),
        "links": [_link(link) for link in doc.get("links") or ()],
        "processes": [_process(p) for p in doc.get("processes") or ()],
        "allocated": doc.get("allocated"),
        "holders": holders,
        "errors": {str(k): str(v) for k, v in (doc.get("errors") or {}).items()},
    }


class NotASnapshot(ValueError):
    """The agent answered with something that is not a snapshot document."""


def reduce_snapshot(doc: Any) -> dict[str, Any]:
    """The compact node document kept by the aggregator; `NotASnapshot` if `doc` is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("devices"), list):
        raise NotASnapshot("the agent's answer has no device list")
    if not all(isinstance(d, dict) and isinstance(d.get("uuid"), str) for d in doc["devices"]):
        raise NotASnapshot("a device of the agent's answer has no uuid")
    try:
        node_labels = doc.get("node") or {}
        attribution = doc.get("attribution") or {}
        return {
            "node_id": str(attribution.get("node_id") or node_labels.get("ray_node_id") or ""),
            "taken_at": float(doc.get("taken_at") or 0.0),
            "interval_s": float(doc.get("interval_s") or 0.0),
            "cycle": int(doc.get("cycle") or 0),
            "labels": {str(k): str(v) for k, v in node_labels.items()},
            "placement": {str(k): str(v) for k, v in (doc.get("placement") or {}).items()},
            "agent": {str(k): str(v) for k, v in (doc.get("agent") or {}).items()},
            "backends": [{"name": b.get("name", ""), "vendor": b.get("vendor", ""),
                          "up": bool(b.get("up")), "device_count": b.get("device_count", 0),
                          "message": b.get("message", "")}
                         for b in doc.get("backends") or ()],
            "attribution": {
                "age_s": attribution.get("age_s"),
                "sources": list(attribution.get("sources") or ()),
                "knows_allocations": any("holders" in d for d in doc["devices"]),
            },
            "devices": [_device(d) for d in doc["devices"]],
            "transfers": from_snapshot(doc.get("transfers"), float(doc.get("taken_at") or 0.0)),
        }
    except (AttributeError, TypeError, ValueError) as error:
        raise NotASnapshot(f"malformed snapshot: {error}") from error


SUMMARY_KIND = "ray-accel.node-summary"
# The summary's response headers carrying what changes every cycle (not in its body).
TAKEN_AT_HEADER = "X-Ray-Accel-Taken-At"
CYCLE_HEADER = "X-Ray-Accel-Cycle"
# The agent's clock when it answered: the head tells a sample's age on its own clock from
# it, whatever the agent's clock says (a node whose clock is off is not shown stale).
NOW_HEADER = "X-Ray-Accel-Now"


def reduce_summary(doc: Any) -> dict[str, Any]:
    """The node document kept by the aggregator, from an agent's `/api/v1/summary`.

    The summary carries only the fields the cluster views read (and omits empty
    ones); every other field of `reduce_snapshot()`'s form gets its empty default,
    so the aggregator walks both forms alike. `taken_at` comes from the response's
    header, not from the body. `NotASnapshot` if `doc` is not a summary.
    """
    if not isinstance(doc, dict) or doc.get("kind") != SUMMARY_KIND \
            or not isinstance(doc.get("devices"), list):
        raise NotASnapshot("the agent's answer is not a node summary")
    try:
        devices = []
        for device in doc["devices"]:
            check_device(device)
            found = SummaryDevice({k: _shared(k, v) for k, v in device.items()
                                   if k not in _LIST_FIELDS})
            # an empty list is not stored: the field reads as the shared default []
            if device.get("holders"):
                found["holders"] = [_holder(h) for h in device["holders"]]
            if device.get("processes"):
                found["processes"] = [SummaryProcess({k: share(v) for k, v in {
                    **_identity(p), "memory_bytes": _number(p.get("memory_bytes")),
                    "sm_utilization": _number(p.get("sm_utilization"))}.items()})
                    for p in device["processes"]]
            if device.get("links"):
                found["links"] = [{**_link({}), **link} for link in device["links"]]
            devices.append(found)
        return {
            "node_id": str(doc.get("node_id") or ""),
            "taken_at": 0.0,
            "interval_s": _interval(doc.get("interval_s")),
            "cycle": 0,
            "labels": {}, "agent": {}, "backends": [],
            "placement": {str(k): str(v) for k, v in (doc.get("placement") or {}).items()},
            "attribution": {"age_s": None, "sources": [],
                            "knows_allocations": bool(doc.get("knows_allocations"))},
            "devices": devices,
            "transfers": from_summary(doc.get("transfers")),
        }
    except (AttributeError, TypeError, ValueError) as error:
        raise NotASnapshot(f"malformed summary: {error}") from error


def _interval(item: Any) -> float:
    """A summary's sampling interval (0.0 where it gives none); ValueError if not a
    finite number."""
    interval = _number(item or 0.0)
    if interval is None:
        raise ValueError(f"interval_s holds {item!r:.40}")
    return interval


# The empty defaults of every summary device's absent fields: one shared set of empty
# values (the aggregator only reads device documents), so 80,000 devices do not each
# hold their own empty dicts and lists.
_SUMMARY_DEFAULTS = _device({})
_PROCESS_DEFAULTS = _process({})


class SummaryProcess(FieldRecord):
    """A process on a device, from a summary: `reduce_snapshot()`'s process fields."""

    __slots__ = tuple(_PROCESS_DEFAULTS)
    DEFAULTS = _PROCESS_DEFAULTS


class SummaryDevice(FieldRecord):
    """A device from a summary: one slot per field of `reduce_snapshot()`'s device form,
    read like it; absent fields read as its empty defaults (`device["links"]` is `[]`)
    without being stored."""

    __slots__ = tuple(_SUMMARY_DEFAULTS)
    DEFAULTS = _SUMMARY_DEFAULTS

    def complete(self) -> dict[str, Any]:
        """Every field as `reduce_snapshot()`'s dict form (for answers that list them)."""
        return {**self.as_dict(), "processes": [p.as_dict() for p in self["processes"]]}


# Summary device fields read into lists of their own form.
_LIST_FIELDS = frozenset({"holders", "processes", "links"})
# Summary device fields whose whole value repeats across a fleet's devices.
_FACT_FIELDS = frozenset({"pcie", "fabric", "throttle_reasons", "xid_errors", "errors"})


def _shared(name: str, item: Any) -> Any:
    """A summary device field's value made of shared objects (shared_values.py): names and
    rounded figures each once, and whole facts (PCIe link, fabric) once per distinct one."""
    return share_fact(item) if name in _FACT_FIELDS else share(item)
