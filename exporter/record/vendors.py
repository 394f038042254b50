"""What the scenario builder needs to know of one vendor's recorded devices.

Each recordable vendor (nvidia.py, amd.py) describes itself once as a
`VendorRecorder`: how its devices become scenario devices, which of its call
names error and delay rules may name, which calls a hung device's replay hangs. The
vendor-neutral parts (frames, series, timeline, events, privacy) serve all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import Device
from .series import DeviceSeries

LinkFacts = Mapping[tuple[str, int], Mapping[str, str]]
Numa = Mapping[str, int | None]


@dataclass(frozen=True)
class VendorRecorder:
    """One vendor's part of a recorded scenario."""

    vendor: str
    # the physical device object, given its recorded children's entries
    device: Callable[[Device, DeviceSeries, LinkFacts, float, list[dict[str, Any]]],
                     dict[str, Any]]
    # a child's entry (NVIDIA MIG device, AMD compute partition)
    child: Callable[[Device, DeviceSeries, float], dict[str, Any]]
    # the device's keys derived from its peers (topology, P2P), given every NUMA node
    peers: Callable[[Device, Numa], dict[str, Any]]
    # top-level scenario keys from the backend's facts (driver and library versions)
    top_level: Callable[[Mapping[str, str]], dict[str, Any]]
    call_prefix: str  # the vendor library's function names: what error rules may name
    absent_kinds: frozenset[str]  # failure kinds that are an absent key, not a fault
    # the sampling calls a stale device's replay hangs; empty: the family's scenario has no
    # delay rules (no hangs, no `busy` costs)
    hung_calls: tuple[str, ...]
    # the family's own scenario section ("gaudi", "tpu"), holding its devices (under
    # `devices_key`), errors and versions; None: its devices are the scenario's `devices`,
    # its versions top-level keys
    section: str | None = None
    devices_key: str | None = "devices"  # None: the section lists no devices one by one
    count_key: str | None = None  # where it lists none one by one: the key counting them
    # a section's keys about the whole host, from its devices, their series, the backend's
    # facts, each device's children with theirs and the recording's interval (TPU: the
    # slice, the latencies, its failures; Neuron: the node, its runtimes, its faults)
    host_keys: Callable[[Sequence[Device], Sequence[DeviceSeries], Mapping[str, str],
                         Mapping[str, Sequence[tuple[Device, DeviceSeries]]], float],
                        dict[str, Any]] | None = None
    records_errors: bool = True  # whether failing calls become the section's error rules
    # the failure kinds of a device gone for good: down with one of them to the end of the
    # recording, it is lost (`lost_at_s`); down otherwise, its failing call is an error rule
    lost_kinds: frozenset[str] = frozenset()
    wildcard: str = "*"  # what an error rule names for every call of the library
    # calls whose lasting absence no key of the scenario's device says (a GPU that lists its
    # processes but cannot share out their utilization): failed with one of the
    # `absent_kinds` outside `lost_kinds`, each is an error rule for the whole replay
    unkeyed_calls: frozenset[str] = frozenset()

    def identified(self, device: Device) -> bool:
        """A physical device whose discovery finished (not a placeholder of one that had not)."""
        return not device.parent_uuid and device.model != "unknown"
