"""The network adapters nearest each accelerator, from the PCI tree in sysfs.

A NIC is near a device when both hang below the same PCIe switch (what
`nvidia-smi topo -m` calls PIX or PXB): their sysfs device paths share more
than the root port. Those sharing the deepest common bridge are nearest. RDMA
traffic between devices on different nodes should use those NICs.
"""

from __future__ import annotations

from pathlib import Path

SYSFS = Path("/sys")
NIC_CLASSES = ("net", "infiniband")


def _pci_address(bus_id: str) -> str:
    """NVML's "00000000:18:00.0" as sysfs names it: "0000:18:00.0"."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.lower()


def _parts(path: Path) -> tuple[str, ...]:
    return path.resolve().parts


def _root_depth(parts: tuple[str, ...]) -> int:
    """Index just past the PCI root bus (the "pci0000:00" element)."""
    return next((i + 1 for i, part in enumerate(parts) if part.startswith("pci")), len(parts))


def _shared(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def _nic_paths(sysfs: Path) -> dict[str, tuple[str, ...]]:
    found = {}
    for nic_class in NIC_CLASSES:
        folder = sysfs / "class" / nic_class
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            device = entry / "device"
            if device.exists():
                found[entry.name] = _parts(device)[:-1]  # the bridges above the NIC
    return found


def nearest_nics(pci_bus_id: str, sysfs: Path = SYSFS) -> list[str]:
    """Names of the NICs sharing the deepest PCIe switch with the device (may be empty)."""
    device = sysfs / "bus" / "pci" / "devices" / _pci_address(pci_bus_id)
    if not pci_bus_id or not device.exists():
        return []
    above_device = _parts(device)[:-1]
    root = _root_depth(above_device)
    scores = {name: _shared(above_device, path) for name, path in _nic_paths(sysfs).items()}
    best = max(scores.values(), default=0)
    if best <= root:
        return []  # nothing below the same switch: only the root complex is shared
    return sorted(name for name, score in scores.items() if score == best)
