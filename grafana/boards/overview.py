"""Cluster overview: how many accelerators, how busy, who holds them idle, which nodes are sick."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ..promql import TOP_LEVEL, eq
from . import uids
from .common import (
    RANGE,
    Board,
    Query,
    Section,
    board_link,
    increase,
    sel,
    stat,
    table,
    timeseries,
)

GENERAL = eq("task", m.TASK_GENERAL)
ECC = eq("error_type", m.ECC_UNCORRECTED)
NODE_DETAIL = board_link(uids.NODE, "Node detail", "var-node=${__data.fields.ray_node_id}")


def board() -> Board:
    util = sel(m.GPU_UTILIZATION, GENERAL)
    # sums of memory and power over top-level devices: a part's are in its device's figures
    usage, limit = sel(m.MEMORY_USAGE, TOP_LEVEL), sel(m.MEMORY_LIMIT, TOP_LEVEL)
    power = sel(m.POWER, TOP_LEVEL)
    by_node = "by (ray_node_id)"
    return Board(
        uid=uids.OVERVIEW,
        title="Accelerators: cluster overview",
        description="Every accelerator of the Ray cluster: how many, how busy, which ones Ray "
                    "assigned and which of those sit idle, and where hardware is failing.",
        sections=[
            Section("Fleet", [
                stat("Devices", "Accelerators the agents report.",
                     Query(f"count({sel(m.DEVICE_UP)})")),
                stat("Devices down", "Devices lost or not answering the agent.",
                     Query(f"count({sel(m.DEVICE_UP)} == 0) or vector(0)"), warn_above=0.5),
                stat("Assigned by Ray", "Devices Ray's scheduler has assigned to workers "
                     "(fractional assignments add up).",
                     Query(f"sum({sel(m.DEVICE_ALLOCATED)})")),
                stat("Assigned but idle", "Devices held by Ray workers that do not use them.",
                     Query(f"sum({sel(m.ALLOCATION_IDLE)} * {sel(m.ALLOCATION)})"),
                     warn_above=0.5),
                stat("Mean utilization", "Mean compute utilization over every device.",
                     Query(f"avg({util})"), unit="percentunit"),
                stat("Memory in use", "Device memory in use, of all devices' memory.",
                     Query(f"sum({usage}) / sum({limit})"), unit="percentunit"),
            ]),
            Section("Nodes", [
                table("Nodes", "One row per Ray node; click a node for its detail board.",
                      Query(f"count {by_node} ({sel(m.DEVICE_UP)})"),
                      Query(f"count {by_node} ({sel(m.DEVICE_UP)} == 0) or "
                            f"sum {by_node} ({sel(m.DEVICE_UP)}) * 0"),
                      Query(f"avg {by_node} ({util})"),
                      Query(f"sum {by_node} ({sel(m.DEVICE_ALLOCATED)})"),
                      Query(f"sum {by_node} ({sel(m.ALLOCATION_IDLE)} * {sel(m.ALLOCATION)})"),
                      Query(f"sum {by_node} ({usage}) / sum {by_node} ({limit})"),
                      Query(f"sum {by_node} ({power})"),
                      names={"Value #A": "Devices", "Value #B": "Down",
                             "Value #C": "Utilization", "Value #D": "Assigned",
                             "Value #E": "Assigned but idle", "Value #F": "Memory in use",
                             "Value #G": "Power (W)"},
                      links=[NODE_DETAIL]),
                timeseries("Utilization by node", "Mean compute utilization of each node's "
                           "devices.", Query(f"avg {by_node} ({util})", "{{ray_node_id}}"),
                           unit="percentunit", low=0, high=1),
                timeseries("Assigned and idle devices", "Devices Ray assigned, and how many of "
                           "them their holders leave idle.",
                           Query(f"sum({sel(m.DEVICE_ALLOCATED)})", "assigned"),
                           Query(f"sum({sel(m.ALLOCATION_IDLE)} * {sel(m.ALLOCATION)})",
                                 "assigned but idle"),
                           Query(f"count({sel(m.DEVICE_UP)})", "devices")),
                timeseries("Memory in use by node", "Device memory in use on each node.",
                           Query(f"sum {by_node} ({usage})", "{{ray_node_id}}"), unit="bytes"),
                timeseries("Power by node", "Power drawn by each node's devices.",
                           Query(f"sum {by_node} ({power})", "{{ray_node_id}}"),
                           unit="watt"),
            ]),
            Section("Health", [
                timeseries("Hardware error events by node", "XID events and new uncorrectable "
                           "ECC errors per node; details on the device health board.",
                           Query(f"sum {by_node} ({increase(sel(m.XID_ERRORS))})",
                                 "{{ray_node_id}} XID"),
                           Query(f"sum {by_node} ({increase(sel(m.HW_ERRORS, ECC))})",
                                 "{{ray_node_id}} uncorrectable ECC"), bars=True),
                timeseries("Devices down by node", "Devices lost or not answering, per node.",
                           Query(f"count {by_node} ({sel(m.DEVICE_UP)} == 0)",
                                 "{{ray_node_id}}"), bars=True),
                table("Models", "Device models and driver versions in the cluster.",
                      Query(f"count by (vendor, model, driver_version) ({sel(m.DEVICE_INFO)})"),
                      names={"Value": "Devices"}, width=12, height=6),
                stat("Energy in range", "Energy the devices used over the board's time range.",
                     Query(f"sum({increase(sel(m.ENERGY, TOP_LEVEL), RANGE)})"), unit="joule",
                     width=12, height=6),
            ]),
        ],
    )
