"""What attribution knows about the Ray workers on this node, at one moment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .transfers import Abort, SystemCall, Transfer


@dataclass(frozen=True, slots=True)
class RayIdentity:
    """Who a process is in Ray's terms; empty strings where not applicable."""

    pid: int
    job_id: str = ""
    worker_id: str = ""
    actor_id: str = ""
    actor_class: str = ""
    actor_name: str = ""
    task_id: str = ""
    task_name: str = ""

    def labels(self) -> dict[str, str]:
        """This identity as the catalog's RAY_LABELS, in their order."""
        return {
            "pid": str(self.pid), "ray_job_id": self.job_id, "ray_worker_id": self.worker_id,
            "ray_actor_id": self.actor_id, "actor_class": self.actor_class,
            "actor_name": self.actor_name, "ray_task_id": self.task_id,
            "task_name": self.task_name,
        }


@dataclass(frozen=True, slots=True)
class Holder:
    """A Ray worker that Ray's scheduler assigned (a fraction of) a device to."""

    identity: RayIdentity
    fraction: float


# The Ray sources attribution reads, as named in SourceStatus and the attribution.up metric.
DISCOVERY = "discovery"
RAYLET = "raylet"
WORKERS = "workers"  # the node's workers, asked which tasks they run
STATE_API = "state_api"  # what a long-running task is, one task id at a time
TRANSFERS = "transfers"  # the cluster's unfinished actor tasks, listed by the pairing agent


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Whether one Ray source (the raylet, the State API) answered the last refresh."""

    name: str
    up: bool
    message: str = ""


@dataclass(frozen=True, slots=True)
class Grant:
    """Ray's scheduler gave `quantity` of slot `slot` of `resource` to a worker."""

    identity: RayIdentity
    resource: str
    slot: int
    quantity: float


@dataclass(frozen=True, slots=True)
class Attribution:
    """The Ray side of the node: identities by pid, and what Ray granted to whom.

    `visible_devices` is the raylet's own visible-device lists (variable ->
    entries, None when unset), which turn granted slots into physical devices.
    """

    node_id: str = ""
    session_name: str = ""
    node_labels: Mapping[str, str] = field(default_factory=dict)
    refreshed_at: float = 0.0
    sources: tuple[SourceStatus, ...] = ()
    identities: Mapping[int, RayIdentity] = field(default_factory=dict)
    grants: tuple[Grant, ...] = ()
    visible_devices: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    # label name -> values left out of labels by the cardinality guard since start
    dropped_labels: Mapping[str, int] = field(default_factory=dict)
    # Ray Direct Transport (transfers.py): this node's long-running `__ray_call__`s,
    # and, on the agent that pairs them (the head node's), the cluster's transfers
    # and the stalled ones that ended with both actors dead, by job.
    rdt_calls: tuple[SystemCall, ...] = ()
    transfers: tuple[Transfer, ...] = ()
    pairs_transfers: bool = False
    transfers_listed_at: float = 0.0  # when `transfers` were listed (wall clock); 0.0: never
    transfer_aborts: Mapping[str, int] = field(default_factory=dict)
    recent_aborts: tuple[Abort, ...] = ()  # the latest counted, with both their calls

    @property
    def knows_allocations(self) -> bool:
        """True when the raylet answered, so an absent holder means an unallocated device."""
        return any(source.name == RAYLET and source.up for source in self.sources)

    def identity(self, pid: int) -> RayIdentity:
        """The Ray identity of a pid, or an identity with only the pid when not a Ray worker."""
        return self.identities.get(pid) or RayIdentity(pid)


UNATTRIBUTED = Attribution()
