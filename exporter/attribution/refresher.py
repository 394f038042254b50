"""Refreshes the Ray side of attribution on its own cadence, apart from sampling.

A slow or unreachable GCS delays only this thread: sampling keeps publishing
with the last attribution, and when Ray cannot be reached the attribution is
empty (devices flow unattributed) and says why, until Ray answers again.

Each refresh asks the local raylet for the node's workers, the workers whose
tasks moved for their running task ids, and the head's State API only about this
node's long-running tasks (worker_tasks.py); only the agent that pairs transfers
lists the cluster's actor tasks, at a pace its cost sets (pairing_pace.py). So
what a node costs the head does not grow with the cluster.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from .guard import TaskIdGuard
from .model import (
    DISCOVERY,
    RAYLET,
    STATE_API,
    TRANSFERS,
    WORKERS,
    Attribution,
    Grant,
    RayIdentity,
    SourceStatus,
)
from .pairing_pace import Listed, PairingPace
from .ray_sources import RayNotFound, RaySourceError, RaySources, RayWorkerInfo, RunningTask
from .slots import VENDOR_RESOURCES
from .transfers import (
    DEFAULT_REPORT_AFTER_S,
    DEFAULT_STALL_AFTER_S,
    Abort,
    AbortTracker,
    ActorTask,
    SystemCall,
    Transfer,
    long_running_calls,
    pair_transfers,
)
from .worker_tasks import TaskDetails, WorkerTasks

log = logging.getLogger(__name__)

Discover = Callable[[], RaySources]
RAYLET_FAILURES_BEFORE_REDISCOVERY = 3
ACCELERATOR_RESOURCES = frozenset(resource for resource, _ in VENDOR_RESOURCES.values())


@dataclass(frozen=True)
class TransferSettings:
    """How the agent watches Ray Direct Transport transfers (docs/transfers.md)."""

    enabled: bool = True
    stall_after_s: float = DEFAULT_STALL_AFTER_S
    report_after_s: float = DEFAULT_REPORT_AFTER_S
    pairing: str = "auto"


def _holds_accelerators(worker: RayWorkerInfo) -> bool:
    return any(worker.grants.get(r) for r in ACCELERATOR_RESOURCES)


def _tasks_by_pid(workers: list[RayWorkerInfo], ids_by_pid: dict[int, tuple[str, ...]],
                  details: dict[str, ActorTask]) -> dict[int, RunningTask]:
    """The task each worker is labelled with: its first-seen running task that is not
    known to be a `__ray_call__` (one the State API has not named yet counts), named
    once the State API has."""
    tasks = {}
    for worker in workers:
        ids = ids_by_pid.get(worker.pid, ())
        if not ids:
            continue
        chosen = next((i for i in ids if i not in details or not details[i].is_system_call),
                      ids[0])
        name = details[chosen].name if chosen in details else ""
        tasks[worker.pid] = RunningTask(chosen, name, worker.job_id, worker.actor_id, worker.pid)
    return tasks


def _unnamed(task: ActorTask) -> ActorTask:
    """The task without its actor class (`names=False`): `__ray_call__` stays."""
    return replace(task, name=task.name.rpartition(".")[2])


def _nameless(calls: tuple[SystemCall, ...]) -> tuple[SystemCall, ...]:
    return tuple(replace(c, task=_unnamed(c.task)) for c in calls)


def _nameless_transfers(transfers: tuple[Transfer, ...]) -> tuple[Transfer, ...]:
    return tuple(replace(t, source=replace(t.source, task=_unnamed(t.source.task)),
                         destination=replace(t.destination, task=_unnamed(t.destination.task)))
                 for t in transfers)


def _nameless_aborts(aborts: tuple[Abort, ...]) -> tuple[Abort, ...]:
    return tuple(replace(a, source=_unnamed(a.source), destination=_unnamed(a.destination))
                 for a in aborts)


class AttributionRefresher:
    """Holds the latest `Attribution`, rebuilt every `interval_s` on a background thread."""

    def __init__(self, discover: Discover, interval_s: float = 2.0,
                 guard: TaskIdGuard | None = None, rediscover_s: float = 10.0,
                 timeout_s: float = 5.0, transfers: TransferSettings | None = None,
                 names: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        """`names=False` leaves actor classes, actor names and task names out of labels;
        `clock` paces the pairing agent's listings."""
        self._discover = discover
        # Off unless asked for (the agent asks, per its --no-transfers flag).
        self.transfer_settings = transfers or TransferSettings(enabled=False)
        self._aborts = AbortTracker()
        self.interval_s = interval_s
        self._rediscover_s = rediscover_s
        self._timeout_s = timeout_s
        self._guard = guard or TaskIdGuard()
        self._names = names
        self._sources: RaySources | None = None
        self._worker_tasks = WorkerTasks()
        self._task_details = TaskDetails()
        self._lazy_statuses: dict[str, SourceStatus] = {}
        self._pairing = PairingPace(interval_s, clock)
        self._raylet_failures = 0
        self._next_discovery = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.latest = Attribution(sources=(SourceStatus(DISCOVERY, False, "not tried yet"),))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="ray-accel-attribution",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout_s * 2 + self.interval_s)
        if self._sources is not None:
            self._sources.close()

    def refresh(self) -> Attribution:
        """Rebuild the attribution now and make it the latest."""
        sources = self._connected_sources()
        if sources is None:
            return self.latest
        statuses = []
        try:
            workers = sources.workers(timeout_s=self._timeout_s)
            statuses.append(SourceStatus(RAYLET, True))
            self._raylet_failures = 0
        except RaySourceError as error:
            workers = []
            statuses.append(SourceStatus(RAYLET, False, str(error)))
            self._forget_node_after_failures()
        ids_by_pid, details = self._running(sources, workers)
        statuses.extend(self._lazy_statuses.values())
        attribution = self._build(sources, workers, _tasks_by_pid(workers, ids_by_pid, details),
                                  tuple(statuses))
        if self.transfer_settings.enabled:
            attribution = self._with_transfers(sources, workers, ids_by_pid, details, attribution)
        self.latest = attribution
        return self.latest

    def _running(self, sources: RaySources, workers: list[RayWorkerInfo]
                 ) -> tuple[dict[int, tuple[str, ...]], dict[str, ActorTask]]:
        """The running task ids of the workers that need them (accelerator holders, and
        actors when watching transfers), and what the long-running ones among them are."""
        watch_actors = self.transfer_settings.enabled
        asked = [w for w in workers if _holds_accelerators(w) or (watch_actors and w.actor_id)]
        deadline = time.monotonic() + self._timeout_s
        ids_by_pid, outcome = self._worker_tasks.update(
            asked, lambda w: sources.running_task_ids(
                w, timeout_s=max(deadline - time.monotonic(), 0.001)))
        sources.forget_workers(w.address for w in asked)
        self._note(WORKERS, outcome)
        # Names label the holders' tasks; transfers need to know the actors' system calls.
        def described(w: RayWorkerInfo) -> bool:
            return (self._names and _holds_accelerators(w)) or bool(watch_actors and w.actor_id)

        named = [i for w in asked if described(w) for i in ids_by_pid.get(w.pid, ())]
        details, outcome = self._task_details.update(
            named, lambda task_id: sources.task_detail(task_id, timeout_s=self._timeout_s))
        self._note(STATE_API, outcome)
        return ids_by_pid, details

    def _note(self, source: str, outcome: str | None) -> None:
        """Keep a lazily asked source's status: it stands until the source is asked again."""
        if outcome is not None:
            self._lazy_statuses[source] = SourceStatus(source, not outcome, outcome)

    def _with_transfers(self, sources: RaySources, workers: list[RayWorkerInfo],
                        ids_by_pid: dict[int, tuple[str, ...]], details: dict[str, ActorTask],
                        attribution: Attribution) -> Attribution:
        """The attribution with this node's long-running `__ray_call__`s and, when this
        agent pairs (the head's, by default), the cluster's transfers."""
        settings = self.transfer_settings
        running_here = [details[i] for w in workers if w.actor_id
                        for i in ids_by_pid.get(w.pid, ()) if i in details]
        now = time.time()
        calls = long_running_calls(running_here, now, settings.report_after_s)
        pairs = settings.pairing == "always" or (settings.pairing == "auto"
                                                  and sources.node.is_head)
        transfers: tuple[Transfer, ...] = ()
        statuses, listed_at = attribution.sources, 0.0
        if pairs:
            # Only the pairing agent lists the cluster's actor tasks: one listing for the
            # whole cluster, not one per node, and paced by its cost (pairing_pace.py).
            self._pairing.update(lambda: self._list_transfers(sources, now))
            transfers, listed_at = self._pairing.transfers, self._pairing.listed_at
            if self._pairing.status is not None:
                statuses = (*statuses, self._pairing.status)
        aborts = tuple(self._aborts.recent)
        if not self._names:
            calls, transfers = _nameless(calls), _nameless_transfers(transfers)
            aborts = _nameless_aborts(aborts)
        return replace(attribution, sources=statuses, rdt_calls=self._admitted(calls),
                       transfers=transfers, pairs_transfers=pairs,
                       transfers_listed_at=listed_at,
                       transfer_aborts=dict(self._aborts.aborts), recent_aborts=aborts)

    def _list_transfers(self, sources: RaySources, now: float) -> Listed:
        """The cluster's transfers from one listing of its actor tasks."""
        settings = self.transfer_settings
        try:
            tasks = sources.actor_tasks(timeout_s=self._timeout_s)
        except RaySourceError as error:
            return (), SourceStatus(TRANSFERS, False, str(error)), 0.0
        transfers = self._aborts.alive(pair_transfers(
            tasks, now, settings.stall_after_s, report_after_s=settings.report_after_s))
        self._count_aborts(sources, transfers)
        return transfers, SourceStatus(TRANSFERS, True), now

    def _admitted(self, calls: tuple[SystemCall, ...]) -> tuple[SystemCall, ...]:
        # Their task ids are labels too: the same cardinality guard applies.
        return tuple(replace(c, task=replace(c.task, task_id=self._guard.admit(c.task.task_id)))
                     for c in calls)

    def _count_aborts(self, sources: RaySources, transfers: tuple[Transfer, ...]) -> None:
        actors = self._aborts.update(transfers, time.time())
        if not actors:
            return
        try:
            states = sources.actor_states(actors, timeout_s=self._timeout_s)
        except RaySourceError as error:
            log.warning("cannot tell whether stalled transfers were aborted: %s", error)
            return
        self._aborts.settle(states, time.time())

    def _forget_node_after_failures(self) -> None:
        # A raylet that stays away may have been replaced (a restarted node has a
        # new id): after a few failures, look for the local node again.
        self._raylet_failures += 1
        if self._raylet_failures >= RAYLET_FAILURES_BEFORE_REDISCOVERY and self._sources:
            self._sources.close()
            self._sources = None
            self._raylet_failures = 0

    def _build(self, sources: RaySources, workers: list[RayWorkerInfo],
               tasks_by_pid: dict[int, RunningTask],
               statuses: tuple[SourceStatus, ...]) -> Attribution:
        identities: dict[int, RayIdentity] = {}
        grants: list[Grant] = []
        for worker in workers:
            task = tasks_by_pid.get(worker.pid)
            identity = RayIdentity(
                pid=worker.pid, job_id=worker.job_id, worker_id=worker.worker_id,
                actor_id=worker.actor_id,
                actor_class=worker.actor_class if self._names else "",
                actor_name=worker.actor_name if self._names else "",
                task_id=self._guard.admit(task.task_id) if task else "",
                task_name=task.name if task and self._names else "",
            )
            identities[worker.pid] = identity
            for resource, resource_grants in worker.grants.items():
                grants.extend(Grant(identity, resource, g.slot, g.quantity)
                              for g in resource_grants)
        return Attribution(
            node_id=sources.node.node_id, node_labels=dict(sources.node.labels),
            session_name=os.path.basename(sources.node.session_dir.rstrip("/")),
            refreshed_at=time.time(), sources=statuses,
            identities=identities, grants=tuple(grants),
            visible_devices=dict(sources.node.visible_devices),
            dropped_labels={"ray_task_id": self._guard.dropped},
        )

    def _connected_sources(self) -> RaySources | None:
        if self._sources is not None:
            return self._sources
        now = time.monotonic()
        if now < self._next_discovery:
            return None
        try:
            self._sources = self._discover()
            log.info("attributing to Ray node %s", self._sources.node.node_id)
            return self._sources
        except (RayNotFound, RaySourceError) as error:
            self._next_discovery = now + self._rediscover_s
            self.latest = Attribution(sources=(SourceStatus(DISCOVERY, False, str(error)),),
                                      dropped_labels=self.latest.dropped_labels)
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # attribution must never take the agent down
                log.exception("attribution refresh failed")
            self._stop.wait(self.interval_s)
