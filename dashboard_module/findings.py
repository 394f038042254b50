"""What is wrong in the cluster: each device's and node's findings, and a device's health.

A finding is a plain record (`Finding`) the API serves as JSON as it is; the tab's
Findings view, a node's page and the summary's counts all read the same records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from ..exporter import catalog as m
from ..exporter.model import UNKNOWN_MODEL
from ..exporter.node_view import HARMFUL_THROTTLE_REASONS
from .node_state import NODE_OK, NODE_STALE, NODE_UNREACHABLE, NodeState

SEVERITIES = ("critical", "warning", "info")
# The kinds this module finds (the transfers' own are in transfers_view.py).
KINDS = ("device_down", "node_unreachable", "node_stale", "device_stale",
         "idle_allocation", "throttling", "ecc_uncorrected", "row_remap", "xid",
         "pcie_downtrained", "link_down", "fabric_unhealthy", "spinning", "collective_stall")
# Device health, worst first.
DOWN, STALE, WARNING, OK = "down", "stale", "warning", "ok"
# A lower PCIe generation than the maximum only counts as downtrained on a busy device:
# an idle device drops its link speed to save power (grafana/thresholds.py uses the same).
PCIE_BUSY_UTILIZATION = 0.10
# A device at or above this on its die's sensor (an AMD GPU's edge sensor) counts as hot.
HOT_CELSIUS = 85.0
# A hotspot sensor (AMD MI300 and later have no edge sensor) reads hotter than the die's
# average, by more on a busy GPU; such a device counts as hot when its limiters say so.
_LIMITER_ONLY_SENSORS = frozenset({"hotspot"})
_HEAT_REASONS = frozenset(m.HEAT_REASONS)


class Finding(TypedDict):
    """One thing wrong, as the API serves it."""

    kind: str
    severity: str
    node_id: str
    hostname: str
    message: str
    device_uuid: str  # "" for a node's own finding
    device_index: str
    details: NotRequired[dict[str, Any]]


def finding(kind: str, severity: str, node_id: str, hostname: str, message: str,
            device: Mapping[str, Any] | None = None, **details: Any) -> Finding:
    """One finding, filed under the node `node_id` (and the device, when it is about one)."""
    found: Finding = {"kind": kind, "severity": severity, "node_id": node_id,
                      "hostname": hostname, "message": message,
                      "device_uuid": device["uuid"] if device else "",
                      "device_index": device["index"] if device else ""}
    if details:
        found["details"] = details
    return found


def _finding(kind: str, severity: str, node: NodeState, message: str,
             device: Mapping[str, Any] | None = None, **details: Any) -> Finding:
    return finding(kind, severity, node.node_id, node.hostname, message, device, **details)


def unhealthy_fabric(fabric: dict[str, Any] | None) -> str:
    """What is wrong with a GPU's NVLink fabric ("" when nothing, or when it has none).

    The tab's side of RayAcceleratorFabricUnhealthy: registration not completed, failed,
    or a health summary other than healthy.
    """
    if not fabric:
        return ""
    if fabric["state"] != m.FABRIC_STATE_COMPLETED:
        return f"registration {fabric['state_name'] or 'not completed'}"
    if fabric["status"]:
        return f"registration failed ({fabric['status_name'] or fabric['status']})"
    summary = fabric["health_summary"]
    if summary is None or summary == m.FABRIC_SUMMARY_HEALTHY:
        return ""
    issues = ", ".join(fabric["issues"])
    if fabric["incorrect_configuration"] not in ("", "none", "not_supported"):
        issues = issues.replace("incorrect_configuration",
                                f"incorrect_configuration ({fabric['incorrect_configuration']})")
    return f"{fabric['health_summary_name'] or 'not healthy'}" + (f": {issues}" if issues else "")


def _counted_errors(node: NodeState, device: dict[str, Any], name: str) -> list[Finding]:
    """Findings from the device's error counters: uncorrected ECC errors, XID events."""
    found = []
    if device["ecc_uncorrected"]:
        found.append(_finding("ecc_uncorrected", "critical", node,
                              f"{name}: {device['ecc_uncorrected']:.0f} uncorrected ECC errors",
                              device, count=device["ecc_uncorrected"]))
    if device["xid_errors"]:
        codes = ", ".join(f"XID {code} x{count:.0f}"
                          for code, count in sorted(device["xid_errors"].items()))
        found.append(_finding("xid", "critical", node, f"{name}: {codes}", device,
                              xid=device["xid_errors"]))
    return found


def _holder_findings(node: NodeState, device: dict[str, Any], name: str) -> list[Finding]:
    """Holders of the device that do not use it (idle) or only spin on it."""
    found = []
    for holder in device["holders"]:
        who = holder["actor_class"] or holder["task_name"] or f"pid {holder['pid']}"
        details = {"pid": holder["pid"], "ray_job_id": holder["ray_job_id"],
                   "ray_actor_id": holder["ray_actor_id"], "ray_task_id": holder["ray_task_id"],
                   "fraction": holder["fraction"]}
        if holder["idle"]:
            found.append(_finding(
                "idle_allocation", "warning", node,
                f"{who} holds {holder['fraction']:g} of {name} and does not use it", device,
                **details))
        elif holder["spinning"]:
            found.append(_finding(
                "spinning", "warning", node,
                f"{who} holds {name} and spins on it: busy by NVML, its SMs nearly idle",
                device, **details))
    return found


def _model_or_vendor(device: Mapping[str, Any]) -> str:
    """The device's model, or "<vendor> device" for one not identified yet."""
    model = device["model"]
    return model if model and model != UNKNOWN_MODEL else f"{device['vendor'] or 'the'} device"


def device_findings(node: NodeState, device: dict[str, Any]) -> list[Finding]:
    """Everything wrong with one device, most severe first."""
    name = f"{_model_or_vendor(device)} #{device['index']}"
    if not device["up"]:
        # A device that does not answer keeps its counters (the XID that announced the
        # loss among them): what they say is still true.
        return [_finding("device_down", "critical", node, f"{name} is not answering", device,
                         errors=device["errors"]), *_counted_errors(node, device, name)]
    found = []
    if device["stale"]:
        found.append(_finding("device_stale", "warning", node,
                              f"{name}: values are {device['age_s'] or 0:.0f} s old", device))
    found += _counted_errors(node, device, name)
    if device["row_remap_failure"] or device["row_remap_pending"]:
        what = "failed" if device["row_remap_failure"] else "pending (needs a reset)"
        found.append(_finding("row_remap", "critical" if device["row_remap_failure"] else
                              "warning", node, f"{name}: row remap {what}", device))
    harmful = [r for r in device["throttle_reasons"] if r in HARMFUL_THROTTLE_REASONS]
    if harmful:
        found.append(_finding("throttling", "warning", node,
                              f"{name} throttled: {', '.join(harmful)}", device,
                              reasons=harmful))
    pcie = device["pcie"]
    width_low = (pcie["width"] is not None and pcie["width_max"] is not None
                 and pcie["width"] < pcie["width_max"])
    busy = (device["utilization"] or 0.0) > PCIE_BUSY_UTILIZATION
    gen_low = (busy and pcie["generation"] is not None and pcie["generation_max"] is not None
               and pcie["generation"] < pcie["generation_max"])
    if width_low or gen_low:
        found.append(_finding(
            "pcie_downtrained", "warning", node,
            f"{name}: PCIe Gen{pcie['generation'] or 0:.0f} x{pcie['width'] or 0:.0f} "
            f"(capable of Gen{pcie['generation_max'] or 0:.0f} x{pcie['width_max'] or 0:.0f})",
            device, **pcie))
    fabric_problem = unhealthy_fabric(device.get("fabric"))
    if fabric_problem:
        found.append(_finding("fabric_unhealthy", "critical", node,
                              f"{name}: NVLink fabric {fabric_problem}", device,
                              **device["fabric"]))
    down_links = [f"{link['link_type']} {link['index']}" for link in device["links"]
                  if link["up"] is False]
    if down_links:
        found.append(_finding("link_down", "warning", node,
                              f"{name}: {len(down_links)} link(s) down: {', '.join(down_links)}",
                              device, links=down_links))
    if device["collective_suspected_stall"]:
        found.append(_finding("collective_stall", "critical", node,
                              f"{name}: suspected hung collective (busy, its interconnect "
                              "counters flat, no real compute, for the detection window)", device,
                              holders=[h["ray_actor_id"] or h["pid"] for h in device["holders"]]))
    found += _holder_findings(node, device, name)
    return found


def is_hot(device: Mapping[str, Any]) -> bool:
    """Heat holds the device's clocks down (its own limiter says so), or its die reads
    HOT_CELSIUS or more."""
    if not _HEAT_REASONS.isdisjoint(device["throttle_reasons"]):
        return True
    temperature = device["temperature_celsius"]
    return (temperature is not None and temperature >= HOT_CELSIUS
            and device["temperature_sensor"] not in _LIMITER_ONLY_SENSORS)


def device_health(device: dict[str, Any], findings: list[Finding], node_status: str) -> str:
    """down, stale, warning or ok: what the device's findings and its node's status make it."""
    if not device["up"]:
        return DOWN
    if device["stale"] or node_status != NODE_OK:
        return STALE
    if any(f["kind"] != "idle_allocation" for f in findings):
        return WARNING
    return OK


def node_finding(node: NodeState, status: str, now: float) -> Finding | None:
    """The node's own finding: its agent unreachable or stale."""
    if status == NODE_UNREACHABLE:
        return _finding("node_unreachable", "critical", node,
                        f"agent at {node.url} does not answer: {node.error}")
    if status == NODE_STALE:
        age = now - node.data["taken_at"]
        return _finding("node_stale", "warning", node,
                        f"the agent's last snapshot is {age:.0f} s old")
    return None


def ordered(findings: list[Finding]) -> None:
    """Sort `findings` in place: most severe first, then by kind, node and device."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (rank[f["severity"]], f["kind"], f["node_id"], f["device_index"]))
