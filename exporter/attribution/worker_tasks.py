"""Which tasks the node's workers run, and what those tasks are, at a cost that does
not grow with the cluster.

Task ids come from each worker itself (`RaySources.running_task_ids`), asked only
when the worker's task counts in the raylet's node stats moved since it was last
asked: a worker running one long task costs nothing after its first refresh.

What a task is (its name, whether it is a `__ray_call__`, when it started) comes
from the head's State API, one task id at a time, and only for tasks still running
at the next refresh after they were first seen: short tasks never reach the head,
and each long one does once. At most `LOOKUPS_PER_REFRESH` are asked per refresh;
the rest wait for the next. So on a cluster of any size, a node asks the head only
about its own long tasks, not for a listing of the whole cluster's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .ray_errors import RaySourceError
from .ray_records import RayWorkerInfo
from .transfers import ActorTask

LOOKUPS_PER_REFRESH = 4

AskIds = Callable[[RayWorkerInfo], tuple[str, ...]]
AskDetail = Callable[[str], ActorTask | None]


@dataclass
class _Known:
    counts: tuple[int, int]
    task_ids: tuple[str, ...]  # in the order they were first seen running


@dataclass
class WorkerTasks:
    """The running task ids of each worker asked about, kept while its counts stand still."""

    _known: dict[str, _Known] = field(default_factory=dict)  # by worker id

    def update(self, workers: Iterable[RayWorkerInfo],
               ask: AskIds) -> tuple[dict[int, tuple[str, ...]], str | None]:
        """(pid -> running task ids, outcome) for `workers`; the outcome is None when no
        worker was asked, "" when every one asked answered, else the first error. A
        worker that fails costs only its own ids, and is asked again next time."""
        found: dict[int, tuple[str, ...]] = {}
        errors: list[str] = []
        asked = False
        known: dict[str, _Known] = {}
        for worker in workers:
            last = self._known.get(worker.worker_id)
            if last is None or last.counts != worker.task_counts:
                asked = True
                try:
                    ids = ask(worker)
                except RaySourceError as error:
                    errors.append(str(error))
                    continue
                kept = tuple(i for i in (last.task_ids if last else ()) if i in ids)
                last = _Known(worker.task_counts, kept + tuple(sorted(set(ids) - set(kept))))
            known[worker.worker_id] = last
            found[worker.pid] = last.task_ids
        self._known = known
        return found, (errors[0] if errors else "") if asked else None


@dataclass
class TaskDetails:
    """What each long-running task of the node is, looked up once per task."""

    lookups_per_refresh: int = LOOKUPS_PER_REFRESH
    _details: dict[str, ActorTask] = field(default_factory=dict)
    _seen: frozenset[str] = frozenset()  # the ids running at the last refresh

    def update(self, running: Iterable[str],
               ask: AskDetail) -> tuple[dict[str, ActorTask], str | None]:
        """(task id -> detail, outcome) for the ids `running` now; the outcome is None
        when nothing was asked, "" when every lookup answered, else the error.

        A task is looked up when it was running at the last refresh too. Only a row
        that shows it running is kept: one whose RUNNING event has not reached the
        State API yet (events arrive about a second late) is asked again later.
        """
        running = list(dict.fromkeys(running))
        details = {i: self._details[i] for i in running if i in self._details}
        due = [i for i in running if i in self._seen and i not in details]
        outcome = "" if due else None
        for task_id in due[:self.lookups_per_refresh]:
            try:
                detail = ask(task_id)
            except RaySourceError as error:
                outcome = str(error)
                break
            if detail is not None and detail.running:
                details[task_id] = detail
        self._details, self._seen = details, frozenset(running)
        return dict(details), outcome
