"""The vendor-neutral model every backend produces and every sink reads.

Values are in base units (bytes, watts, joules, hertz, ratios 0-1). A value a
device cannot report is absent from its sample, never zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .attribution.model import UNATTRIBUTED, Attribution, Holder

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Peer:
    """How a device reaches another device of the node.

    `connection` uses the vocabulary of `nvidia-smi topo -m`: NV<n> for n NVLinks
    (direct or through NVSwitch), PIX (one PCIe switch), PXB (several PCIe
    switches), PHB (a PCIe host bridge), NODE (host bridges within a NUMA node),
    SYS (across NUMA nodes); `p2p` is "OK" or why peer-to-peer access is refused.
    """

    uuid: str
    index: str
    connection: str
    p2p: str = ""


UNKNOWN_MODEL = "unknown"  # the model of a device not identified yet (its name call failed)


@dataclass(frozen=True, slots=True)
class Device:
    """Identity and static facts of one accelerator (a physical GPU or a MIG instance).

    `facts` holds what the vendor reports about it that never changes while the
    driver is loaded (architecture, NUMA node, CPU affinity, NVLink domain, ...).
    """

    vendor: str
    index: str
    uuid: str
    model: str
    pci_bus_id: str = ""
    parent_uuid: str = ""
    facts: Mapping[str, str] = field(default_factory=dict)
    peers: tuple[Peer, ...] = ()

    def labels(self) -> dict[str, str]:
        """The labels that identify this device on every one of its series."""
        return {"vendor": self.vendor, "model": self.model, "index": self.index,
                "uuid": self.uuid}


# Reading and Link are not frozen, only treated as immutable (nothing assigns to them after
# they are made): a cycle of an 8-GPU node makes over a thousand readings and 150 links, and a
# frozen dataclass costs about three times as much to make (each field set through
# object.__setattr__). A Reading stays hashable, by value.


@dataclass(slots=True, unsafe_hash=True)
class Reading:
    """One value of a catalog metric, with the metric's own labels (e.g. `task`)."""

    metric: str
    value: float
    labels: Labels = ()


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """A process seen on a device by the vendor library."""

    pid: int
    readings: tuple[Reading, ...] = ()


@dataclass(slots=True)
class Link:
    """One interconnect link of a device (NVLink, XGMI, or its PCIe host link).

    `facts` says what it connects to (version, remote_type, remote_pci_bus_id,
    peer_uuid); `rates` (direction -> bytes/s) are computed by the sampler from
    two consecutive samples of the link's byte counters. `counters_at` is when
    the byte counters were read (wall clock), where the backend knows: rates
    then span the time between two readings, and a link whose counters were
    not read again (Gaudi's NIC ports, read in turn) keeps its last rates.
    None: read at the sample's `taken_at`.
    """

    link_type: str
    index: int
    readings: tuple[Reading, ...] = ()
    facts: Mapping[str, str] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)
    counters_at: float | None = None

    def labels(self) -> dict[str, str]:
        """The labels that identify the link among its device's links."""
        return {"link_type": self.link_type, "link": str(self.index)}


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """Everything read from one device in one sampling cycle.

    `up` is False when the device is lost or failing; its readings are then
    only its counters at their last values and the events counted for it
    (gauges are not true any more), `taken_at` stays when those values were
    read, and its links keep only their counters. `stale` is True when the
    vendor library has not answered for the device in time (a hung call, a
    discovery not finished). `errors` maps a vendor function to the error it
    returned this cycle, for the metrics that are absent because of it.
    `processes_listed` is False where the vendor library cannot list the
    processes using a device (HLML): an empty `processes` then says nothing
    about who uses it.
    """

    device: Device
    up: bool
    taken_at: float
    duration_s: float = 0.0
    readings: tuple[Reading, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    links: tuple[Link, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)
    processes_listed: bool = True
    stale: bool = False


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """Whether a vendor backend is working, and why not.

    `absent`: not up because neither its library nor its devices are on this host.
    """

    name: str
    vendor: str
    up: bool
    device_count: int = 0
    message: str = ""
    facts: Mapping[str, str] = field(default_factory=dict)
    absent: bool = False


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One sampling cycle's view of the whole node; sinks read only this."""

    cycle: int
    taken_at: float
    interval_s: float
    node_labels: Mapping[str, str]
    backends: tuple[BackendStatus, ...]
    devices: tuple[DeviceSample, ...]
    cycle_duration_s: float = 0.0
    # (backend, kind, function) -> count since the agent started
    error_counts: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    agent_facts: Mapping[str, str] = field(default_factory=dict)
    attribution: Attribution = UNATTRIBUTED
    # device uuid -> the Ray workers holding it, from the attribution's grants
    holders: Mapping[str, tuple[Holder, ...]] = field(default_factory=dict)
    # device uuid -> suspected hung collective (collective.py), for devices with a verdict
    collective_stalls: Mapping[str, bool] = field(default_factory=dict)


def actor_devices(snapshot: NodeSnapshot) -> dict[str, tuple[str, ...]]:
    """Ray actor id -> UUIDs of the devices (on this node) Ray assigned to it."""
    found: dict[str, list[str]] = {}
    for uuid, holders in snapshot.holders.items():
        for holder in holders:
            if holder.identity.actor_id:
                found.setdefault(holder.identity.actor_id, []).append(uuid)
    return {actor: tuple(sorted(uuids)) for actor, uuids in found.items()}


def labels_of(pairs: Iterable[tuple[str, str]] | Mapping[str, str]) -> Labels:
    """Normalise metric labels to the hashable, ordered form readings carry."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    return tuple((str(k), str(v)) for k, v in items)


def stale_after_s(interval_s: float) -> float:
    """How old a device's last values may be before they count as stale."""
    return max(3 * interval_s, 2.0)

