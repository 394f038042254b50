"""The node's device topology as a matrix, the way `nvidia-smi topo -m` prints it."""

from __future__ import annotations

from collections.abc import Sequence

from .model import Device

LEGEND = """\
Legend:
  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NODE = Connection traversing PCIe and the interconnect between host bridges in a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


# What each vendor's devices are called (nvidia-smi and amd-smi: GPU); others GPU too.
_KINDS = {"google": "TPU", "aws": "ND", "intel": "HPU"}


def device_names(physical: Sequence[Device]) -> list[str]:
    """Column names: the kind and index (GPU0, TPU3), with the vendor in front where two
    vendors' devices would share a name (a node with NVIDIA and AMD GPUs)."""
    names = [f"{_KINDS.get(d.vendor, 'GPU')}{d.index}" for d in physical]
    if len(set(names)) < len(names):
        names = [f"{d.vendor}:{name}" for d, name in zip(physical, names, strict=True)]
    return names


def matrix(devices: Sequence[Device]) -> list[list[str]]:
    """Rows of cells: a header row, then one row per physical device.

    Columns: every physical device, then CPU affinity, NUMA affinity and
    nearest NICs (the last three from the device's facts).
    """
    physical = [d for d in devices if not d.parent_uuid]
    names = device_names(physical)
    rows = [["", *names, "CPU Affinity", "NUMA Affinity", "NICs"]]
    for name, device in zip(names, physical, strict=True):
        by_peer = {peer.uuid: peer.connection for peer in device.peers}
        cells = ["X" if other.uuid == device.uuid else by_peer.get(other.uuid, "") or "?"
                 for other in physical]
        facts = device.facts
        rows.append([name, *cells, facts.get("cpu_affinity", "") or "N/A",
                     facts.get("numa_node", "") or "N/A", facts.get("nearest_nics", "") or "-"])
    return rows


def render(devices: Sequence[Device], legend: bool = True) -> str:
    """The matrix as aligned text, optionally followed by the legend."""
    rows = matrix(devices)
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    return "\n".join(lines) + ("\n\n" + LEGEND if legend else "") + "\n"
