"""Interconnect and topology: NVLink/XGMI and PCIe bandwidth per link, link state and errors,
PCIe generation and width against their maximum, and how devices reach each other."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ..promql import eq
from . import uids
from .common import Board, Query, Section, rate, sel, table, timeseries

FABRIC = f'link_type!="{m.LINK_PCIE}"'  # NVLink, XGMI: device-to-device links
PCIE = eq("link_type", m.LINK_PCIE)
DEVICE = "{{vendor}} {{index}} {{ray_node_id}}"
HIDDEN = ("Time", "SessionName", "simulated", "vendor", "model", "Value")


def _pcie_state(name: str, state: str) -> Query:
    return Query(f"max by (ray_node_id, vendor, index, uuid) ({sel(name, eq('state', state))})")


def _downtrained(name: str) -> str:
    return (f"{sel(name, eq('state', 'current'))} < ignoring(state) "
            f"{sel(name, eq('state', 'max'))}")


def board() -> Board:
    return Board(
        uid=uids.INTERCONNECT,
        title="Accelerators: interconnect and topology",
        description="Traffic on every NVLink/XGMI link and PCIe host link, link state and "
                    "errors, PCIe links running below their maximum, and the device topology "
                    "(nvidia-smi topo -m).",
        sections=[
            Section("Bandwidth", [
                timeseries("NVLink / XGMI bandwidth per device", "Bytes per second over all "
                           "device-to-device links of each device, by direction.",
                           Query("sum by (ray_node_id, vendor, index, direction) "
                                 f"({rate(sel(m.LINK_IO, FABRIC))})", DEVICE + " {{direction}}"),
                           unit="Bps"),
                timeseries("PCIe bandwidth per device", "Bytes per second over each device's "
                           "PCIe host link, by direction: from the byte counters, and as the "
                           "device measures it (NVIDIA GPM; the driver's sample on Gaudi).",
                           Query(rate(sel(m.LINK_IO, PCIE)), DEVICE + " {{direction}}"),
                           Query(sel(m.GAUDI_PCIE_THROUGHPUT), DEVICE + " {{direction}} (sampled)"),
                           unit="Bps"),
                timeseries("NVLink and C2C bandwidth measured by the device", "Bytes per "
                           "second over each device's NVLinks and Grace C2C links, by "
                           "direction, as the device measures it (NVIDIA GPM).",
                           Query("sum by (ray_node_id, vendor, index, link_type, direction) "
                                 f"({sel(m.LINK_THROUGHPUT)})",
                                 DEVICE + " {{link_type}} {{direction}}"), unit="Bps"),
                timeseries("Bandwidth per link", "Bytes per second on each NVLink/XGMI link: "
                           "an uneven spread points at a slow or missing link.",
                           Query(rate(sel(m.LINK_IO, FABRIC)),
                                 "{{vendor}} {{index}} {{link_type}} {{link}} {{direction}}"),
                           unit="Bps", width=24, height=10),
            ]),
            Section("Link health", [
                table("Links down", "Links that exist but are not trained and active.",
                      Query(f"{sel(m.LINK_UP)} == 0"), hidden=HIDDEN, width=8),
                timeseries("Active links per device", "Links up, per device and link type.",
                           Query("sum by (ray_node_id, vendor, index, link_type) "
                                 f"({sel(m.LINK_UP)})", DEVICE + " {{link_type}}"), width=8),
                timeseries("Link errors", "Link-level errors per second, by link and type.",
                           Query("sum by (ray_node_id, vendor, index, link, error_type) "
                                 f"({rate(sel(m.LINK_ERRORS))})",
                                 "{{vendor}} {{index}} link {{link}} {{error_type}}"), width=8),
                timeseries("PCIe replays", "PCIe packets the device had to resend, per second.",
                           Query(rate(sel(m.HW_ERRORS, eq("error_type", m.PCIE_REPLAY))),
                                 DEVICE), width=8),
            ]),
            Section("PCIe link state", [
                table("PCIe link state", "Current PCIe generation and width of each device "
                      "against the most the device and slot support.",
                      _pcie_state(m.PCIE_GENERATION, "current"),
                      _pcie_state(m.PCIE_GENERATION, "max"),
                      _pcie_state(m.PCIE_WIDTH, "current"), _pcie_state(m.PCIE_WIDTH, "max"),
                      names={"Value #A": "Gen", "Value #B": "Max gen", "Value #C": "Width",
                             "Value #D": "Max width"}, width=12),
                table("Downtrained PCIe links", "Links running narrower, or at a lower "
                      "generation, than their maximum (a lower generation is normal while idle).",
                      Query(_downtrained(m.PCIE_WIDTH)), Query(_downtrained(m.PCIE_GENERATION)),
                      names={"Value #A": "Width", "Value #B": "Gen"}, width=12),
                timeseries("PCIe generation", "Current and maximum PCIe generation.",
                           Query(sel(m.PCIE_GENERATION), DEVICE + " {{state}}")),
                timeseries("PCIe width", "Current and maximum PCIe width (lanes).",
                           Query(sel(m.PCIE_WIDTH), DEVICE + " {{state}}")),
            ]),
            Section("Hung collectives", [
                table("Suspected hung collectives", "Devices busy while their NVLink/XGMI "
                      "(else PCIe) byte counters stay flat for the agent's window: a "
                      "collective spinning on peers that never answer. The "
                      "RayAcceleratorCollectiveSuspectedStall alert's candidates.",
                      Query(f"{sel(m.COLLECTIVE_SUSPECTED_STALL)} == 1"), hidden=HIDDEN,
                      width=12),
                timeseries("Suspected hung collectives by node", "Devices suspected of a hung "
                           "collective, per node and job.",
                           Query(f"sum by (ray_node_id, ray_job_id) "
                                 f"({sel(m.COLLECTIVE_SUSPECTED_STALL)})",
                                 "{{ray_node_id}} job {{ray_job_id}}"), stacked=True),
            ]),
            Section("Topology", [
                table("Device topology", "How each device (row) reaches each peer (column), as "
                      "in nvidia-smi topo -m: NV# for NVLinks, PIX/PXB/PHB/NODE/SYS for PCIe "
                      "paths. Select one node.",
                      Query(sel(m.TOPOLOGY)), matrix={"rowField": "index",
                                                      "columnField": "peer_index",
                                                      "valueField": "connection"}),
                table("Peer-to-peer access", "Each device pair, its connection and whether "
                      "peer-to-peer access works.", Query(sel(m.TOPOLOGY)),
                      hidden=HIDDEN, width=12),
                table("Links", "What each link connects to.", Query(sel(m.LINK_INFO)),
                      hidden=HIDDEN, width=12),
                table("NUMA, CPU affinity and NVLink domain", "Where each device sits relative "
                      "to CPUs, NICs and the NVLink fabric.",
                      Query(f"max by (ray_node_id, vendor, index, numa_node, cpu_affinity, "
                            f"nvlink_domain, nearest_nics) ({sel(m.DEVICE_INFO)})"),
                      hidden=HIDDEN),
            ]),
        ],
    )
