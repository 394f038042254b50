"""PCIe, XGMI links and the topology between devices."""

from __future__ import annotations

from typing import Any

from ray_accel.exporter.simulate.checks import normalize_pci_bus_id
from ray_accel.exporter.simulate.signals import counter_at, value_at

from . import amdsmi_wrapper
from ._interface_common import NA, amdsmi_bdf, board_target, check_enum, required
from ._interface_types import AMDSMI_MAX_NUM_XGMI_LINKS, AmdSmiLinkType
from ._simulation import SIMULATION, Target, library_error

_MT_PER_S = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}


def _xgmi_peer(source: Target, other: Target) -> bool:
    bus = str(other.device.get("pci_bus_id", "")).lower()
    return any(normalize_pci_bus_id(link["remote_pci_bus_id"], "").lower() == bus
               for link in source.device.get("xgmi_links") or ())


def amdsmi_get_pcie_info(processor_handle):
    target = board_target(SIMULATION.enter("amdsmi_get_pcie_info", processor_handle))
    link = required(target.device, "pcie_link")
    t = SIMULATION.time()
    bandwidth = target.device.get("pcie_bandwidth_mbps")
    replay = target.device.get("pcie_replay")
    return {
        "pcie_static": {
            "max_pcie_width": link["width_max"],
            "max_pcie_speed": _MT_PER_S.get(link["gen_max"], NA),
            "pcie_interface_version": link["gen_max"],
            "slot_type": "OAM" if target.device.get("xgmi_links") else "PCIE",
        },
        "pcie_metric": {
            "pcie_width": link["width_current"],
            "pcie_speed": _MT_PER_S.get(link["gen_current"], NA),
            "pcie_bandwidth": NA if bandwidth is None else round(value_at(bandwidth, t)),
            "pcie_replay_count": NA if replay is None else counter_at(replay, t),
            "pcie_l0_to_recovery_count": 0,
            "pcie_replay_roll_over_count": 0,
            "pcie_nak_sent_count": 0,
            "pcie_nak_received_count": 0,
            "pcie_lc_perf_other_end_recovery_count": 0,
        },
    }


def _xgmi_links(target: Target) -> list[Any]:
    links = required(target.device, "xgmi_links")
    return list(links)


def amdsmi_get_link_metrics(processor_handle):
    target = board_target(SIMULATION.enter("amdsmi_get_link_metrics", processor_handle))
    links = _xgmi_links(target)
    t = SIMULATION.time()
    slots = []
    for i in range(AMDSMI_MAX_NUM_XGMI_LINKS):
        if i < len(links):
            link = links[i]
            slots.append({
                "bdf": amdsmi_bdf(normalize_pci_bus_id(link["remote_pci_bus_id"], "")),
                "bit_rate": link.get("bit_rate_gbps", 0) if link.get("state", True) else 0,
                "max_bandwidth": link.get("max_bandwidth_gbps", 0),
                "link_type": amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI,
                "read": counter_at(link.get("read_kb", 0), t),
                "write": counter_at(link.get("write_kb", 0), t),
            })
        else:
            slots.append({"bdf": "0000:00:00.0", "bit_rate": 0, "max_bandwidth": 0,
                          "link_type": amdsmi_wrapper.AMDSMI_LINK_TYPE_INTERNAL,
                          "read": 0, "write": 0})
    return {"num_links": len(links), "links": slots}


def amdsmi_get_gpu_xgmi_link_status(processor_handle):
    target = board_target(SIMULATION.enter("amdsmi_get_gpu_xgmi_link_status", processor_handle))
    links = _xgmi_links(target)
    return {"status": ["U" if link.get("state", True) else "D" for link in links],
            "total_links": len(links)}


def _pair(function: str, source: Any, destination: Any) -> tuple[Target, Target]:
    first = SIMULATION.enter(function, source)
    second = SIMULATION.enter(function, destination)
    if first.ordinal == second.ordinal:
        raise library_error(amdsmi_wrapper.AMDSMI_STATUS_INVAL)
    return first, second


def _same_numa(first: Target, second: Target) -> bool:
    return first.device.get("numa_node") == second.device.get("numa_node")


def amdsmi_topo_get_link_type(processor_handle_src, processor_handle_dst):
    first, second = _pair("amdsmi_topo_get_link_type", processor_handle_src,
                          processor_handle_dst)
    if _xgmi_peer(first, second):
        return {"hops": 1, "type": amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI}
    return {"hops": 2 if _same_numa(first, second) else 3,
            "type": amdsmi_wrapper.AMDSMI_LINK_TYPE_PCIE}


def amdsmi_topo_get_link_weight(processor_handle_src, processor_handle_dst):
    first, second = _pair("amdsmi_topo_get_link_weight", processor_handle_src,
                          processor_handle_dst)
    if _xgmi_peer(first, second):
        return 15
    return 40 if _same_numa(first, second) else 52


def amdsmi_topo_get_numa_node_number(processor_handle):
    target = SIMULATION.enter("amdsmi_topo_get_numa_node_number", processor_handle)
    node = required(target.device, "numa_node")
    return node


def amdsmi_is_P2P_accessible(processor_handle_src, processor_handle_dst):
    _pair("amdsmi_is_P2P_accessible", processor_handle_src, processor_handle_dst)
    return True


def amdsmi_get_link_topology_nearest(processor_handle, link_type):
    target = SIMULATION.enter("amdsmi_get_link_topology_nearest", processor_handle)
    check_enum(link_type, AmdSmiLinkType)
    peers = []
    for other in SIMULATION.devices():
        if other.ordinal == target.ordinal:
            continue
        xgmi = _xgmi_peer(target, other)
        if (link_type == AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI) == xgmi:
            rank = 0 if xgmi else 1 if _same_numa(target, other) else 2
            peers.append((rank, other.handle))
    # the real list holds the handles' pointer values (ints), as ctypes reads them back
    return {"processor_list": [value for _, value in sorted(peers)]}
