"""The node's GPU topology as NVML sees it: device pairs, NUMA, CPU affinity, NVLink domain.

Read once when the backend opens; none of it changes while the driver is loaded. (The
fabric's state and health can change: fabric.py reads them every cycle.)
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pynvml

from ...model import Peer
from .fabric import uuid_text
from .fabric_health import STATE_COMPLETED
from .interconnect import NvLinkFacts

# PCIe levels of nvmlDeviceGetTopologyCommonAncestor -> `nvidia-smi topo -m` names.
PCIE_LEVELS = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "X",
    pynvml.NVML_TOPOLOGY_SINGLE: "PIX",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
    pynvml.NVML_TOPOLOGY_NODE: "NODE",
    pynvml.NVML_TOPOLOGY_SYSTEM: "SYS",
}
P2P_STATUS = {
    pynvml.NVML_P2P_STATUS_OK: "OK",
    pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED: "chipset_not_supported",
    pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED: "gpu_not_supported",
    pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: "topology_not_supported",
    pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY: "disabled_by_regkey",
    pynvml.NVML_P2P_STATUS_NOT_SUPPORTED: "not_supported",
}
_P2P_READ = 0  # NVML_P2P_CAPS_INDEX_READ (the binding defines it as a tuple by mistake)
_CPU_WORDS = 16  # affinity masks of 64 CPUs each: up to 1024 CPUs


def _quiet(fn: Any, *args: Any) -> Any | None:
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def cpu_ranges(masks: Iterable[int], bits_per_word: int = 64) -> str:
    """CPU bit masks as a cpuset list: "0-55,112-167"."""
    cpus = [word * bits_per_word + bit for word, mask in enumerate(masks)
            for bit in range(bits_per_word) if mask >> bit & 1]
    ranges: list[str] = []
    start = previous = None
    for cpu in [*cpus, None]:
        if start is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(ranges)


def placement_facts(handle: Any) -> dict[str, str]:
    """NUMA node, CPU affinity and NVLink domain of one physical GPU, where reported."""
    facts: dict[str, str] = {}
    numa = _quiet(pynvml.nvmlDeviceGetNumaNodeId, handle)
    if numa is not None:
        facts["numa_node"] = str(numa)
    masks = _quiet(pynvml.nvmlDeviceGetCpuAffinity, handle, _CPU_WORDS)
    if masks is not None:
        facts["cpu_affinity"] = cpu_ranges(int(mask) for mask in masks)
    fabric = pynvml.c_nvmlGpuFabricInfoV_t()
    # The binding passes the struct as given: it must be a pointer.
    answered = _quiet(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(fabric))
    if answered is not None and fabric.state == STATE_COMPLETED:
        facts["nvlink_domain"] = f"{uuid_text(bytes(fabric.clusterUuid))}/{fabric.cliqueId}"
    return facts


def _nvlink_connection(mine: Sequence[NvLinkFacts], theirs: Sequence[NvLinkFacts],
                       their_bus: str, same_domain: bool) -> str:
    direct = sum(1 for link in mine if link.remote_pci_bus_id.lower() == their_bus.lower())
    if direct:
        return f"NV{direct}"
    my_switched = sum(1 for link in mine if link.remote_type == "switch")
    their_switched = sum(1 for link in theirs if link.remote_type == "switch")
    if my_switched and their_switched and same_domain:
        return f"NV{min(my_switched, their_switched)}"
    return ""


def peers_of(index: int, handles: Sequence[Any], buses: Sequence[str],
             nvlinks: Sequence[Sequence[NvLinkFacts]], indices: Sequence[str],
             uuids: Sequence[str], domains: Sequence[str]) -> tuple[Peer, ...]:
    """How physical GPU `index` reaches each other physical GPU of the node."""
    peers = []
    for other, handle in enumerate(handles):
        if other == index:
            continue
        same_domain = domains[index] == domains[other]
        connection = _nvlink_connection(nvlinks[index], nvlinks[other], buses[other],
                                        same_domain)
        if not connection:
            level = _quiet(pynvml.nvmlDeviceGetTopologyCommonAncestor, handles[index], handle)
            connection = PCIE_LEVELS.get(level, "") if level is not None else ""
        status = _quiet(pynvml.nvmlDeviceGetP2PStatus, handles[index], handle, _P2P_READ)
        peers.append(Peer(uuid=uuids[other], index=indices[other], connection=connection,
                          p2p=P2P_STATUS.get(status, "") if status is not None else ""))
    return tuple(peers)


def peer_uuid_by_link(nvlinks: Sequence[NvLinkFacts],
                      uuid_by_bus: Mapping[str, str]) -> dict[int, str]:
    """NVLink index -> the GPU at its far end, for direct GPU-to-GPU links."""
    return {link.index: uuid_by_bus[link.remote_pci_bus_id.lower()]
            for link in nvlinks if link.remote_pci_bus_id.lower() in uuid_by_bus}
