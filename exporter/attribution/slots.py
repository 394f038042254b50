"""Maps Ray's resource slots to the physical devices the agent sees.

The raylet hands out slot indices into its own visible-device list: slot 1 of
"GPU" on a raylet started with CUDA_VISIBLE_DEVICES=3,1 is physical GPU 1, and
the worker holding it sees CUDA_VISIBLE_DEVICES=1. Entries may be indices or
(prefixes of) UUIDs, MIG instances included. With the variable unset, slot i is
physical device i. Ray's "neuron_cores" slots are NeuronCores: slot i is the i-th
core of the raylet's NEURON_RT_VISIBLE_CORES (ranges such as "0-3" expanded), or
core i with it unset. Ray's "HPU" slots are Gaudi module ids (HABANA_VISIBLE_MODULES
lists module ids, not HLML indices), matched on the device's `module_id` fact.

In a container (a KubeRay pod given some of a node's GPUs) the raylet sees only
the GPUs the NVIDIA runtime gave it, numbered from 0 in PCI bus order, while the
agent beside it may see every GPU of the host. The raylet's NVIDIA_VISIBLE_DEVICES
names those GPUs (UUIDs, or host indices): its indices then count among them.
"all", or a value that names no GPU this way (a device-list file's path), leaves
indices as the host's. The GPUs it does not name are another pod's (`outside_pod`):
the agent leaves them to that pod's own agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..model import UNKNOWN_MODEL, Device
from .model import Grant, Holder

# vendor -> (Ray resource name, raylet environment variables listing its devices, in priority)
VENDOR_RESOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvidia": ("GPU", ("CUDA_VISIBLE_DEVICES",)),
    "amd": ("GPU", ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")),
    "google": ("TPU", ("TPU_VISIBLE_CHIPS",)),
    "aws": ("neuron_cores", ("NEURON_RT_VISIBLE_CORES",)),
    "intel": ("HPU", ("HABANA_VISIBLE_MODULES",)),
}
# vendor -> the container runtime's variable in the raylet's environment naming the
# host devices its container was given.
CONTAINER_DEVICES: dict[str, str] = {"nvidia": "NVIDIA_VISIBLE_DEVICES"}
# Its values that give a container no device.
NO_CONTAINER_DEVICES = frozenset({"none", "void"})
# Vendors whose visible lists name devices by the device fact given here, not by index:
# NeuronCores (sub-devices; lists may hold ranges, "0-3,6"), Gaudi module ids.
SLOT_FACTS: dict[str, str] = {"aws": "neuroncore", "intel": "module_id"}


def _expand_ranges(entries: Sequence[str]) -> tuple[str, ...]:
    expanded: list[str] = []
    for entry in entries:
        first, dash, last = entry.strip().partition("-")
        if dash and first.isdigit() and last.isdigit():
            expanded.extend(str(i) for i in range(int(first), int(last) + 1))
        else:
            expanded.append(entry.strip())
    return tuple(expanded)


def _match(entry: str, devices: Sequence[Device], fact: str = "",
           numbered: Sequence[Device] | None = None) -> Device | None:
    """The device `entry` names: by `fact`, by UUID (or a unique prefix of one), or by
    index, a position in `numbered` where given, else the device's own index."""
    entry = entry.strip()
    if fact:
        return next((d for d in devices if d.facts.get(fact) == entry), None)
    if entry.isdigit():
        if numbered is not None:
            return numbered[int(entry)] if int(entry) < len(numbered) else None
        return next((d for d in devices if not d.parent_uuid and d.index == entry), None)
    matches = [d for d in devices if d.uuid == entry] or [
        d for d in devices if d.uuid.startswith(entry)
    ]
    return matches[0] if len(matches) == 1 else None


def _container_devices(vendor: str, devices: Sequence[Device],
                       visible: Mapping[str, tuple[str, ...] | None]) -> list[Device] | None:
    """The whole devices the raylet's container was given, in the order it numbers them
    (PCI bus order); None where it was given all of them or the list names none."""
    variable = CONTAINER_DEVICES.get(vendor)
    entries = visible.get(variable) if variable else None
    if entries is None or "all" in entries:
        return None
    if not entries or NO_CONTAINER_DEVICES.intersection(entries):
        return []
    whole = [d for d in devices if not d.parent_uuid]
    given = [_match(entry, whole) for entry in entries]
    if any(device is None for device in given):
        return None  # a path, a MIG instance, a GPU not here: the host's indices stand
    return sorted({d.uuid: d for d in given if d is not None}.values(),
                  key=lambda d: d.pci_bus_id.lower())


def outside_pod(devices: Sequence[Device],
                visible: Mapping[str, tuple[str, ...] | None]) -> frozenset[str]:
    """UUIDs of the `devices` (MIG instances with their GPU) that the raylet's container was
    not given, where its container runtime names those it was (`_container_devices`);
    devices not identified yet are never among them."""
    outside: set[str] = set()
    for vendor in CONTAINER_DEVICES:
        vendor_devices = [d for d in devices if d.vendor == vendor]
        given = _container_devices(vendor, vendor_devices, visible) if vendor_devices else None
        if given is None:
            continue
        kept = {d.uuid for d in given}
        outside.update(d.uuid for d in vendor_devices if d.model != UNKNOWN_MODEL
                       and (d.parent_uuid or d.uuid) not in kept)
    return frozenset(outside)


def _visible_list(visible: Mapping[str, tuple[str, ...] | None],
                  variables: tuple[str, ...]) -> tuple[str, ...] | None:
    for variable in variables:
        entries = visible.get(variable)
        if entries is not None:
            return entries
    return None


def slot_devices(devices: Sequence[Device],
                 visible: Mapping[str, tuple[str, ...] | None]) -> dict[tuple[str, int], str]:
    """(Ray resource, slot) -> device uuid, for every vendor with devices here."""
    mapping: dict[tuple[str, int], str] = {}
    for vendor, (resource, variables) in VENDOR_RESOURCES.items():
        vendor_devices = [d for d in devices if d.vendor == vendor]
        if not vendor_devices:
            continue
        fact = SLOT_FACTS.get(vendor, "")
        container = _container_devices(vendor, vendor_devices, visible)
        entries = _visible_list(visible, variables)
        if entries is None:
            slotted = container if container is not None else [
                d for d in vendor_devices if (fact in d.facts if fact else not d.parent_uuid)]
            entries = tuple(str(i) for i in range(len(slotted)))
        elif fact:
            entries = _expand_ranges(entries)
        for slot, entry in enumerate(entries):
            device = _match(entry, vendor_devices, fact, container)
            if device is not None:
                mapping.setdefault((resource, slot), device.uuid)
    return mapping


def assign_holders(devices: Sequence[Device], visible: Mapping[str, tuple[str, ...] | None],
                   grants: Iterable[Grant]) -> dict[str, tuple[Holder, ...]]:
    """Device uuid -> the Ray workers holding it, with the fraction each holds."""
    mapping = slot_devices(devices, visible)
    holders: dict[str, list[Holder]] = {}
    for grant in grants:
        uuid = mapping.get((grant.resource, grant.slot))
        if uuid is not None:
            holders.setdefault(uuid, []).append(Holder(grant.identity, grant.quantity))
    return {uuid: tuple(sorted(found, key=lambda h: h.identity.pid))
            for uuid, found in holders.items()}
