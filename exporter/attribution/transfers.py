"""Ray Direct Transport transfers, seen from the State API: pairing and stall classification.

Ray 2.60 keeps no state about in-flight RDT transfers. A two-sided transfer is
an actor task `<Class>.__ray_call__` running `__ray_send__` on the source actor
and another running `__ray_recv__` on the destination, both submitted by the
owner of the object (the driver or an actor) one right after the other, on the
actors' `_ray_system` thread. The task that consumes the object runs on the
destination meanwhile, waiting for its argument. Healthy transfers take
milliseconds; Ray aborts one after `RAY_rdt_fetch_fail_timeout_milliseconds`
(60 s) by killing both actors.

From outside the actors (the State API), a send and its receive are told by:
- the same job and the same submitting task (`parent_task_id`), created within
  a short window of each other (`pair_window_s`), on two different actors, one
  of which runs the consuming task (a non-system task submitted by the same
  owner in the same window: submitting it is what triggers the transfer);
- the direction: the consuming task's actor is the destination; when both
  actors have one, a call that started is the send when its peer has not (a
  receive queues behind whatever holds the destination's `_ray_system`
  thread), else the call created first (Ray submits the send first).
The collective group joining the two actors is known only to the driver (Ray
keeps it in the driver's memory), so it is not used.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Who pairs RDT transfers cluster-wide: the head node's agent ("auto"), every agent, none.
PAIRING_MODES = ("auto", "always", "never")

RAY_CALL_SUFFIX = ".__ray_call__"
RUNNING = "RUNNING"
DEFAULT_STALL_AFTER_S = 10.0
DEFAULT_REPORT_AFTER_S = 1.0
DEFAULT_PAIR_WINDOW_S = 0.5
_MAX_DEAD_ACTORS = 10_000
# How many of the latest aborts the tracker keeps with both their actors.
MAX_RECENT_ABORTS = 20
# Task states in which an actor task has not finished.
_DONE = frozenset({"FINISHED", "FAILED"})


@dataclass(frozen=True, slots=True)
class ActorTask:
    """A task that has not finished, as the State API lists it (times in Unix seconds):
    an actor task, or any running task looked up by id (`actor_id` empty for a plain task)."""

    task_id: str
    name: str
    state: str
    job_id: str
    actor_id: str
    parent_task_id: str
    node_id: str
    pid: int
    created_at: float
    started_at: float | None = None

    @property
    def is_system_call(self) -> bool:
        return self.name.endswith(RAY_CALL_SUFFIX)

    @property
    def actor_class(self) -> str:
        return self.name.rpartition(".")[0] if "." in self.name else ""

    @property
    def running(self) -> bool:
        return self.state == RUNNING and self.started_at is not None

    def age_s(self, now: float) -> float:
        """Since it started when running, else since it was submitted."""
        since = self.started_at if self.running else self.created_at
        return max(now - since, 0.0)


@dataclass(frozen=True, slots=True)
class SystemCall:
    """A long-running `__ray_call__` of an actor on this node (the sinks add the devices the
    actor holds, from the snapshot's holders)."""

    task: ActorTask
    age_s: float

    @property
    def state(self) -> str:
        return RUNNING if self.task.running else "PENDING"


@dataclass(frozen=True, slots=True)
class TransferEnd:
    """One end of a transfer: its `__ray_call__` and the actor that runs it."""

    task: ActorTask
    devices: tuple[str, ...] = ()

    @property
    def actor_id(self) -> str:
        return self.task.actor_id


@dataclass(frozen=True, slots=True)
class Transfer:
    """A send paired with its receive; `age_s` counts from the first one's submission.
    `slow`: in flight past the report threshold (stalled ones are slow too)."""

    source: TransferEnd
    destination: TransferEnd
    age_s: float
    stalled: bool
    consumer_task_id: str = ""
    slow: bool = False

    @property
    def job_id(self) -> str:
        return self.source.task.job_id

    def labels(self, actor_devices: Mapping[str, tuple[str, ...]] | None = None
               ) -> dict[str, str]:
        """The catalog's TRANSFER_LABELS; `actor_devices` fills ends whose devices are unknown."""
        known = actor_devices or {}
        src, dst = self.source, self.destination
        src_devices = src.devices or known.get(src.actor_id, ())
        dst_devices = dst.devices or known.get(dst.actor_id, ())
        return {
            "ray_job_id": self.job_id,
            "src_actor_id": src.actor_id, "src_actor_class": src.task.actor_class,
            "src_node_id": src.task.node_id, "src_devices": ",".join(src_devices),
            "dst_actor_id": dst.actor_id, "dst_actor_class": dst.task.actor_class,
            "dst_node_id": dst.task.node_id, "dst_devices": ",".join(dst_devices),
        }


def long_running_calls(tasks: Iterable[ActorTask], now: float,
                       report_after_s: float) -> tuple[SystemCall, ...]:
    """The unfinished `__ray_call__` tasks older than `report_after_s`, oldest first."""
    found = [
        SystemCall(task, task.age_s(now))
        for task in tasks
        if task.is_system_call and task.state not in _DONE and task.age_s(now) >= report_after_s
    ]
    return tuple(sorted(found, key=lambda c: (-c.age_s, c.task.task_id)))


def _consumer(tasks: list[ActorTask], call: ActorTask, window_s: float) -> ActorTask | None:
    """A non-system task on the call's actor, submitted by the same owner around the same time."""
    return next((t for t in tasks
                 if not t.is_system_call and t.actor_id == call.actor_id
                 and t.job_id == call.job_id and t.parent_task_id == call.parent_task_id
                 and abs(t.created_at - call.created_at) <= window_s), None)


def _direction(a: ActorTask, b: ActorTask, tasks: list[ActorTask],
               window_s: float) -> tuple[ActorTask, ActorTask, ActorTask | None]:
    """(send, receive, consuming task) of a pair of calls."""
    consumer_a, consumer_b = _consumer(tasks, a, window_s), _consumer(tasks, b, window_s)
    if consumer_b is not None and consumer_a is None:
        return a, b, consumer_b
    if consumer_a is not None and consumer_b is None:
        return b, a, consumer_a
    if a.running != b.running:
        return (a, b, consumer_b) if a.running else (b, a, consumer_a)
    if b.created_at < a.created_at:
        return b, a, consumer_a
    return a, b, consumer_b


def pair_transfers(tasks: Iterable[ActorTask], now: float,
                   stall_after_s: float = DEFAULT_STALL_AFTER_S,
                   actor_devices: Mapping[str, tuple[str, ...]] | None = None,
                   pair_window_s: float = DEFAULT_PAIR_WINDOW_S,
                   report_after_s: float = DEFAULT_REPORT_AFTER_S) -> tuple[Transfer, ...]:
    """Pairs unfinished `__ray_call__` tasks (of the whole cluster) into transfers.

    A two-sided transfer is always triggered by submitting the task that consumes
    the object, so a pair needs that consuming task on one of the two actors: calls
    without a partner, or pairs without a consumer (the `__ray_call__`s that set up
    a collective group on every member at once, a user's own) are no transfers.
    Each call joins at most one pair; among candidates the one created nearest in
    time wins. Transfers come oldest first.
    """
    devices = actor_devices or {}
    live = [t for t in tasks if t.state not in _DONE]
    calls = sorted((t for t in live if t.is_system_call), key=lambda t: (t.created_at, t.task_id))
    paired: set[str] = set()
    found = []
    for call in calls:
        if call.task_id in paired:
            continue
        candidates = [
            other for other in calls
            if other.task_id not in paired and other.task_id != call.task_id
            and other.actor_id != call.actor_id and other.job_id == call.job_id
            and other.parent_task_id == call.parent_task_id
            and abs(other.created_at - call.created_at) <= pair_window_s
        ]
        candidates.sort(key=lambda o: (abs(o.created_at - call.created_at), o.task_id))
        for partner in candidates:
            send, receive, consumer = _direction(call, partner, live, pair_window_s)
            if consumer is not None:
                break
        else:
            continue  # no consuming task: a collective set-up or a user's own calls
        paired.update((call.task_id, partner.task_id))
        age = max(now - min(send.created_at, receive.created_at), 0.0)
        found.append(Transfer(
            source=TransferEnd(send, devices.get(send.actor_id, ())),
            destination=TransferEnd(receive, devices.get(receive.actor_id, ())),
            age_s=age, stalled=age > stall_after_s,
            consumer_task_id=consumer.task_id if consumer else "",
            slow=age >= report_after_s or age > stall_after_s))
    return tuple(sorted(found, key=lambda t: (-t.age_s, t.source.task.task_id)))


@dataclass(frozen=True, slots=True)
class TransferGroup:
    """The transfers between one pair of actors: how many, how many stalled, the oldest."""

    labels: Mapping[str, str]
    in_flight: int
    stalled: int
    oldest_age_s: float


def grouped(transfers: Iterable[Transfer],
            actor_devices: Mapping[str, tuple[str, ...]] | None = None
            ) -> tuple[TransferGroup, ...]:
    """Transfers summed per label set (one series each), in first-seen order."""
    groups: dict[tuple[tuple[str, str], ...], list[Transfer]] = {}
    for transfer in transfers:
        groups.setdefault(tuple(transfer.labels(actor_devices).items()), []).append(transfer)
    return tuple(
        TransferGroup(dict(key), len(members), sum(t.stalled for t in members),
                      max(t.age_s for t in members))
        for key, members in groups.items()
    )


@dataclass(frozen=True, slots=True)
class Abort:
    """A stalled transfer that ended with both actors dead: its two calls, its age when
    last seen in flight, and when it was counted (Unix seconds)."""

    job_id: str
    source: ActorTask
    destination: ActorTask
    age_s: float
    at: float


class AbortTracker:
    """Counts stalled transfers that ended with both actors dead (how Ray aborts them).

    Feed it each refresh's transfers with `update()`; it returns the actors of
    stalled transfers that are gone and not settled yet. Report what the GCS
    says of them with `settle()`: both dead counts one abort. Ray kills the
    actors around the time the tasks fail, so an ended transfer is checked
    again on later refreshes for `settle_s` before it is let go.
    """

    def __init__(self, settle_s: float = 15.0) -> None:
        self.settle_s = settle_s
        self._stalled: dict[str, Transfer] = {}  # send task id -> the stalled transfer
        self._ended: dict[str, tuple[Transfer, float]] = {}  # ... and its give-up time
        self.aborts: dict[str, int] = {}  # job id -> count
        self.recent: deque[Abort] = deque(maxlen=MAX_RECENT_ABORTS)  # the latest, oldest first
        # Actors found dead after a stall. Calls Ray still sends them (it destroys their
        # collective group with `__ray_call__`s to both) are no transfers; an actor pair
        # is aborted once. Insertion-ordered, so the oldest are forgotten first.
        self._dead: dict[str, None] = {}

    def alive(self, transfers: Iterable[Transfer]) -> tuple[Transfer, ...]:
        """The transfers whose two ends are not known dead."""
        return tuple(t for t in transfers
                     if t.source.actor_id not in self._dead
                     and t.destination.actor_id not in self._dead)

    def update(self, transfers: Iterable[Transfer], now: float) -> set[str]:
        """The actor ids to look up: those of stalled transfers that ended, unsettled."""
        current = {t.source.task.task_id: t for t in transfers}
        for task_id in [t for t in self._stalled if t not in current]:
            self._ended[task_id] = (self._stalled.pop(task_id), now + self.settle_s)
        for task_id, transfer in current.items():
            self.aborts.setdefault(transfer.job_id, 0)  # the counter exists before its first
            if transfer.stalled:
                self._stalled[task_id] = transfer
        return {end.actor_id for transfer, _ in self._ended.values()
                for end in (transfer.source, transfer.destination)}

    def settle(self, actor_states: Mapping[str, str], now: float) -> None:
        """Counts ended transfers whose two actors are dead; forgets those past their time."""
        for task_id, (transfer, give_up_at) in list(self._ended.items()):
            job_id = transfer.job_id
            src, dst = transfer.source.actor_id, transfer.destination.actor_id
            if actor_states.get(src) == "DEAD" and actor_states.get(dst) == "DEAD":
                if src not in self._dead or dst not in self._dead:
                    self.aborts[job_id] = self.aborts.get(job_id, 0) + 1
                    self.recent.append(Abort(job_id, transfer.source.task,
                                             transfer.destination.task, transfer.age_s, now))
                for actor in (src, dst):
                    self._dead[actor] = None
                while len(self._dead) > _MAX_DEAD_ACTORS:
                    del self._dead[next(iter(self._dead))]
                del self._ended[task_id]
            elif now > give_up_at:
                del self._ended[task_id]
