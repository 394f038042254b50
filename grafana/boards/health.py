"""Device health: XID events, ECC and remapped memory, throttling, temperatures, power,
NVLink fabric health, loss."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ..alerts.groups.fabric import unhealthy_fabric
from ..promql import eq, regex
from . import uids
from .common import Board, Query, Section, increase, sel, table, timeseries

DEVICE = "{{vendor}} {{index}} {{ray_node_id}}"
HIDDEN = ("Time", "SessionName", "simulated", "Value")


def board() -> Board:
    return Board(
        uid=uids.HEALTH,
        title="Accelerators: device health",
        description="What tells a sick accelerator: driver XID events, ECC errors and memory "
                    "repair, clock throttling and its reasons, temperatures and power, and "
                    "devices that stopped answering.",
        sections=[
            Section("Errors", [
                timeseries("XID events", "Critical driver errors, by XID code.",
                           Query(f"sum by (ray_node_id, vendor, index, xid) "
                                 f"({increase(sel(m.XID_ERRORS))})", DEVICE + " XID {{xid}}"),
                           bars=True),
                table("XID codes seen", "XID events per device and code since each agent "
                      "started.", Query(sel(m.XID_ERRORS)),
                      hidden=HIDDEN[:-1], names={"Value": "Events"}, width=12),
                timeseries("ECC errors", "New corrected and uncorrectable memory errors.",
                           Query(f"sum by (ray_node_id, vendor, index, error_type) "
                                 f"({increase(sel(m.HW_ERRORS, regex('error_type', 'ecc_.*')))})",
                                 DEVICE + " {{error_type}}"), bars=True),
                timeseries("Remapped rows", "Memory rows remapped, by the kind of error.",
                           Query(sel(m.REMAPPED_ROWS), DEVICE + " {{cause}}")),
                table("Memory repair waiting or failed", "Devices with a row remap or page "
                      "retirement waiting for a reset, or a failed row remap.",
                      Query(f"{sel(m.ROW_REMAP_PENDING)} == 1", "remap pending"),
                      Query(f"{sel(m.ROW_REMAP_FAILURE)} == 1", "remap failed"),
                      Query(f"{sel(m.RETIRED_PAGES_PENDING)} == 1", "retirement pending"),
                      names={"Value #A": "Remap pending", "Value #B": "Remap failed",
                             "Value #C": "Retirement pending"}, width=12,
                      hidden=HIDDEN[:-1]),
                timeseries("Retired pages", "Memory pages retired (older GPUs), by cause.",
                           Query(sel(m.RETIRED_PAGES), DEVICE + " {{cause}}")),
            ]),
            Section("Throttling and thermals", [
                timeseries("Clock event reasons", "Reasons holding the clocks down (1 = active); "
                           "idle is left out.",
                           Query(sel(m.THROTTLE_ACTIVE, f'reason!="{m.REASON_GPU_IDLE}"') + " == 1",
                                 DEVICE + " {{reason}}"), bars=True),
                timeseries("Temperature", "Temperature of each sensor.",
                           Query(sel(m.TEMPERATURE), DEVICE + " {{sensor}}"), unit="celsius"),
                timeseries("Power against the limit", "Power drawn as a fraction of the "
                           "enforced power limit.",
                           Query(f"{sel(m.POWER)} / {sel(m.POWER_LIMIT)}", DEVICE),
                           unit="percentunit"),
                timeseries("SM clock against its maximum", "Current SM clock as a fraction of "
                           "its maximum: throttling shows here first.",
                           Query(f"{sel(m.CLOCK_FREQUENCY, eq('clock', 'sm'))} / "
                                 f"{sel(m.CLOCK_MAX_FREQUENCY, eq('clock', 'sm'))}", DEVICE),
                           unit="percentunit"),
            ]),
            Section("NVLink fabric", [
                table("NVLink fabric", "GPUs of NVSwitch systems (NVL72 racks, HGX B200) whose "
                      "fabric registration is not completed, failed, or whose health summary "
                      "is not healthy, with the fabric's names for it.",
                      Query(f"{sel(m.FABRIC_INFO)} and on (ray_node_id, uuid) "
                            f"({unhealthy_fabric(sel)})"),
                      hidden=HIDDEN, width=12),
                timeseries("Fabric health issues", "Health-mask fields reporting trouble "
                           "(1 = the issue holds), per GPU.",
                           Query(f"{sel(m.FABRIC_HEALTH_ISSUE)} == 1", DEVICE + " {{field}}"),
                           bars=True),
            ]),
            Section("Availability", [
                table("Devices down", "Devices lost or not answering the agent.",
                      Query(f"{sel(m.DEVICE_UP)} == 0"), hidden=HIDDEN, width=12),
                timeseries("Device up", "1 while the device answers each sampling cycle.",
                           Query(sel(m.DEVICE_UP), DEVICE), low=0, high=1),
            ]),
        ],
    )
