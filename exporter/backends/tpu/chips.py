"""Finding the TPU chips of this host: ``/dev/accel*`` and ``/dev/vfio/<group>``, like Ray.

TPU v2-v4 chips are character devices ``/dev/accel<N>``; v5e, v5p, v6e and 7x
chips are bound to vfio-pci and appear as ``/dev/vfio/<IOMMU group>``. As Ray
does, a vfio group counts only when sysfs shows a Google (0x1ae0) PCI device in
it, and a directory ``/dev/accel`` (NVIDIA's accel node on recent drivers) is no
TPU. Sysfs also gives the chip's PCI address, PCI device id (the generation)
and NUMA node.

`RAY_ACCEL_TPU_DEV_DIR` (default ``/dev``) and `RAY_ACCEL_TPU_SYSFS_DIR`
(default ``/sys``) move both roots; the simulation points them at a folder of
its own.
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DEV_DIR_ENV = "RAY_ACCEL_TPU_DEV_DIR"
SYSFS_DIR_ENV = "RAY_ACCEL_TPU_SYSFS_DIR"
GOOGLE_PCI_VENDOR = "0x1ae0"
# PCI device id (and, for v2/v3, subsystem device id) -> (generation, model as JAX names it)
_GENERATIONS: dict[str, tuple[str, str]] = {
    "0x0027/0x004e": ("v2", "TPU v2"),
    "0x0027/0x004f": ("v3", "TPU v3"),
    "0x005e": ("v4", "TPU v4"),
    "0x0063": ("v5e", "TPU v5 lite"),
    "0x0062": ("v5p", "TPU v5"),
    "0x006f": ("v6e", "TPU v6 lite"),
    "0x0076": ("7x", "TPU7x"),
}
# TPU_ACCELERATOR_TYPE prefix (e.g. "v5litepod-8") -> the same, when sysfs says nothing
_TYPE_PREFIXES: tuple[tuple[str, tuple[str, str]], ...] = (
    ("v5litepod", ("v5e", "TPU v5 lite")),
    ("v5e", ("v5e", "TPU v5 lite")),
    ("v5p", ("v5p", "TPU v5")),
    ("v6e", ("v6e", "TPU v6 lite")),
    ("v7x", ("7x", "TPU7x")),
    ("tpu7x", ("7x", "TPU7x")),
    ("v4", ("v4", "TPU v4")),
    ("v3", ("v3", "TPU v3")),
    ("v2", ("v2", "TPU v2")),
)
_ACCEL = re.compile(r"^accel(\d+)$")


@dataclass(frozen=True, slots=True)
class Chip:
    """One TPU chip: its index on the host, device file and what sysfs says of it."""

    index: int
    path: str  # the device file, as /proc/<pid>/fd links name it
    pci_bus_id: str = ""
    generation: str = ""
    model: str = ""
    facts: Mapping[str, str] = field(default_factory=dict)


def dev_dir(environ: Mapping[str, str] | None = None) -> pathlib.Path:
    """The folder standing for ``/dev``."""
    environ = os.environ if environ is None else environ
    return pathlib.Path(environ.get(DEV_DIR_ENV) or "/dev")


def sysfs_dir(environ: Mapping[str, str] | None = None) -> pathlib.Path:
    """The folder standing for ``/sys``."""
    environ = os.environ if environ is None else environ
    return pathlib.Path(environ.get(SYSFS_DIR_ENV) or "/sys")


def _read(path: pathlib.Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _pci_facts(device: pathlib.Path) -> tuple[str, str, str, dict[str, str]]:
    """(bus id, generation, model, facts) of a PCI device folder; empty where unknown."""
    bus_id = device.resolve().name if device.exists() else ""
    device_id = _read(device / "device").lower()
    subsystem = _read(device / "subsystem_device").lower()
    generation, model = _GENERATIONS.get(f"{device_id}/{subsystem}",
                                         _GENERATIONS.get(device_id, ("", "")))
    facts: dict[str, str] = {}
    numa = _read(device / "numa_node")
    if numa and numa != "-1":
        facts["numa_node"] = numa
    return bus_id, generation, model, facts


def _accel_chips(dev: pathlib.Path, sys: pathlib.Path) -> list[Chip]:
    found = []
    for entry in dev.glob("accel*"):
        match = _ACCEL.match(entry.name)
        if match is None or entry.is_dir():
            continue
        bus_id, generation, model, facts = _pci_facts(sys / "class" / "accel" / entry.name /
                                                      "device")
        found.append(Chip(int(match.group(1)), str(entry), bus_id, generation, model, facts))
    return sorted(found, key=lambda c: c.index)


def _vfio_chips(dev: pathlib.Path, sys: pathlib.Path) -> list[Chip]:
    try:
        groups = sorted(int(e.name) for e in (dev / "vfio").iterdir() if e.name.isdigit())
    except OSError:
        return []
    chips = []
    for group in groups:
        devices = sys / "kernel" / "iommu_groups" / str(group) / "devices"
        try:
            members = sorted(devices.iterdir())
        except OSError:
            continue
        google = [m for m in members if _read(m / "vendor").lower() == GOOGLE_PCI_VENDOR]
        if not google:
            continue  # a vfio group of something else (e.g. a BlueField's management device)
        bus_id, generation, model, facts = _pci_facts(google[0])
        chips.append(Chip(len(chips), str(dev / "vfio" / str(group)), bus_id, generation,
                          model, {**facts, "iommu_group": str(group)}))
    return chips


def find_chips(environ: Mapping[str, str] | None = None) -> list[Chip]:
    """The host's TPU chips in index order: accel devices if any, else vfio groups."""
    dev, sys = dev_dir(environ), sysfs_dir(environ)
    return _accel_chips(dev, sys) or _vfio_chips(dev, sys)


def model_from_type(accelerator_type: str) -> tuple[str, str]:
    """(generation, model) from a TPU accelerator type such as "v5litepod-8"; empty if unknown."""
    lowered = accelerator_type.strip().lower().removeprefix("tpu-")
    return next((found for prefix, found in _TYPE_PREFIXES if lowered.startswith(prefix)),
                ("", ""))
