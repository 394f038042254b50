"""Keeps the number of distinct task ids in labels bounded.

Every Ray task has its own id, and an actor method call is a task: exported as
is, task ids would create series without limit. The guard lets at most `cap`
distinct task ids into labels per sliding `window_s`; a task beyond that keeps
its (low-cardinality) task name but gets an empty `ray_task_id`, and is counted
as a dropped label value.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

DEFAULT_TASK_ID_CAP = 1000
DEFAULT_WINDOW_S = 600.0


class _Recent:
    """Keys with the time each was last seen, forgetting those not seen for `window_s`."""

    def __init__(self, window_s: float, max_size: int) -> None:
        self._window_s = window_s
        self._max_size = max_size
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def touch(self, key: str, now: float) -> None:
        self._seen[key] = now
        self._seen.move_to_end(key)
        while len(self._seen) > self._max_size:
            self._seen.popitem(last=False)

    def expire(self, now: float) -> None:
        while self._seen:
            key, last_seen = next(iter(self._seen.items()))
            if now - last_seen < self._window_s:
                break
            del self._seen[key]


class TaskIdGuard:
    """Admits task ids into labels up to a cap per sliding window."""

    def __init__(self, cap: int = DEFAULT_TASK_ID_CAP, window_s: float = DEFAULT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if cap < 0 or window_s <= 0:
            raise ValueError("cap must be >= 0 and window_s > 0")
        self.cap = cap
        self.window_s = window_s
        self._clock = clock
        self._admitted = _Recent(window_s, max(cap, 1))
        # refused ids are remembered only so that each is counted once
        self._refused = _Recent(window_s, max(10 * cap, 1000))
        self.dropped = 0

    def admit(self, task_id: str) -> str:
        """`task_id` if it may appear in labels, else the empty string."""
        if not task_id:
            return ""
        now = self._clock()
        self._admitted.expire(now)
        self._refused.expire(now)
        if task_id in self._admitted or len(self._admitted) < self.cap:
            self._admitted.touch(task_id, now)
            return task_id
        if task_id not in self._refused:
            self.dropped += 1
        self._refused.touch(task_id, now)
        return ""

    @property
    def admitted(self) -> int:
        """Distinct task ids currently admitted."""
        return len(self._admitted)
