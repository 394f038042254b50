"""The node's AMD GPU topology: how GPUs reach each other, their NUMA node, nearest NICs.

Read once when the backend opens. `amdsmi_topo_get_link_type` says whether a
pair talks over XGMI or PCIe (and in how many hops); a PCIe pair is reported
in `nvidia-smi topo -m` terms as NODE (same NUMA node) or SYS (across NUMA
nodes), an XGMI pair as XGMI. Where the pairwise query is unsupported, the
GPU's nearest XGMI peers (`amdsmi_get_link_topology_nearest`) stand in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ...model import Peer
from ...nics import nearest_nics

XGMI_CONNECTION = "XGMI"
_LINK_XGMI, _LINK_PCIE = 2, 1  # AMDSMI_LINK_TYPE_XGMI, AMDSMI_LINK_TYPE_PCIE


@dataclass(frozen=True)
class Placed:
    """A physical GPU as the topology sees it."""

    handle: Any
    uuid: str
    index: str
    pci_bus_id: str


def _quiet(library: ModuleType, function: str, *args: Any) -> Any | None:
    """A discovery-time call whose failure (or absence) only means "not known"."""
    fn = getattr(library, function, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except library.AmdSmiException:
        return None


def _handle_value(handle: Any) -> int | None:
    return getattr(handle, "value", handle)


def placement_facts(library: ModuleType, gpu: Placed) -> dict[str, str]:
    """NUMA node and nearest NICs of one physical GPU, where known."""
    facts: dict[str, str] = {}
    numa = _quiet(library, "amdsmi_topo_get_numa_node_number", gpu.handle)
    if isinstance(numa, int) and not isinstance(numa, bool):
        facts["numa_node"] = str(numa)
    facts["nearest_nics"] = ",".join(nearest_nics(gpu.pci_bus_id))
    return facts


def _xgmi_neighbours(library: ModuleType, gpu: Placed) -> set[int]:
    link_type = getattr(getattr(library, "AmdSmiLinkType", None), "AMDSMI_LINK_TYPE_XGMI", None)
    if link_type is None:
        return set()
    nearest = _quiet(library, "amdsmi_get_link_topology_nearest", gpu.handle, link_type)
    return {_handle_value(h) for h in (nearest or {}).get("processor_list") or ()}


def peers_of(library: ModuleType, gpus: Sequence[Placed], numa: Sequence[str]
             ) -> list[tuple[Peer, ...]]:
    """For each physical GPU, how it reaches every other one."""
    found = []
    for position, gpu in enumerate(gpus):
        neighbours: set[int] | None = None
        peers = []
        for other_position, other in enumerate(gpus):
            if other_position == position:
                continue
            link = _quiet(library, "amdsmi_topo_get_link_type", gpu.handle, other.handle)
            kind = link.get("type") if isinstance(link, dict) else None
            if kind is None:
                if neighbours is None:
                    neighbours = _xgmi_neighbours(library, gpu)
                kind = _LINK_XGMI if _handle_value(other.handle) in neighbours else None
            if kind == _LINK_XGMI:
                connection = XGMI_CONNECTION
            elif numa[position] and numa[other_position]:
                connection = "NODE" if numa[position] == numa[other_position] else "SYS"
            else:
                connection = "PCIE" if kind == _LINK_PCIE else ""
            accessible = _quiet(library, "amdsmi_is_P2P_accessible", gpu.handle, other.handle)
            p2p = "" if accessible is None else "OK" if accessible else "not_supported"
            peers.append(Peer(uuid=other.uuid, index=other.index, connection=connection,
                              p2p=p2p))
        found.append(tuple(peers))
    return found
