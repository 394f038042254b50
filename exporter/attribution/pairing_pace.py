"""How often the pairing agent lists the cluster's actor tasks.

The listing (`RaySources.actor_tasks`, one State API call) costs the head's
dashboard about 0.17 ms of CPU per unfinished actor task in the cluster: a few
milliseconds on most clusters, seconds once tens of thousands are in flight
(docs/benchmarks.md, "What each node's agent asks of the head"). The pairing
agent therefore lists again only once `PACE` times the last listing's own
duration has passed since it ended, and at most `MOST_WAIT_S` after: every
refresh while that wait is shorter than a refresh (listings under 0.2 s at the
2 s default); a head whose listings take up to 3 s spends about a tenth of its
time on them, and the transfers are never more than half of Ray's 60 s
transfer timeout old. In between, they stand as last listed, with the time of
that listing (exported as `ray.accelerator.transfer.listing.age`). A failed
listing is paced the same way: a head too slow to answer in time is not asked
again at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from math import inf

from .model import SourceStatus
from .transfers import Transfer

PACE = 10.0
MOST_WAIT_S = 30.0

#: What one listing gives: the transfers paired from it, the listing's source status, and
#: when (wall clock) it was made; 0.0 where it failed.
Listed = tuple[tuple[Transfer, ...], SourceStatus, float]


@dataclass
class PairingPace:
    """The last listing's transfers and status, and when the next listing is due."""

    interval_s: float = 2.0  # the attribution refresh's
    clock: Callable[[], float] = time.monotonic
    transfers: tuple[Transfer, ...] = ()
    status: SourceStatus | None = None
    listed_at: float = 0.0  # when the transfers were listed (wall clock); 0.0: no listing
    _next_at: float = field(default=-inf, repr=False)

    def update(self, listing: Callable[[], Listed]) -> None:
        """Run `listing` if it is due, and keep what it gave."""
        started = self.clock()
        if started < self._next_at:
            return
        try:
            self.transfers, self.status, self.listed_at = listing()
        finally:
            ended = self.clock()
            wait = PACE * max(ended - started, 0.0)
            self._next_at = ended + min(wait, MOST_WAIT_S) if wait > self.interval_s else -inf
