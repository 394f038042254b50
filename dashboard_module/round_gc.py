"""Garbage collection between the collector's rounds: the view's long-lived objects set aside.

At 10,000 nodes the reduced summaries and the view built from them are millions
of objects that live for many rounds. CPython's cyclic collector walks all of
them in each full collection, holding the interpreter (and the event loop that
answers the tab) for 0.3-0.6 s, several times a minute while rounds make new
objects: at that size most of the head's slowest answers and a fifth of its CPU
(docs/benchmarks.md, section 5). In a large cluster, after each round and after
every `SET_ASIDE_EVERY` summaries kept within one (a first round makes them
all), what exists is moved to the collector's permanent generation
(`gc.freeze()`), so collections walk only what was made since. The summaries and views are acyclic
records, freed by reference counting once replaced; cycles among the set-aside
objects wait for the full collection made every `full_every_s`, after which the
survivors are set aside again.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

FULL_COLLECTION_S = 300.0
# Below this many nodes a full collection is short and nothing is set aside.
MIN_NODES = 500
SET_ASIDE_EVERY = 1000


class RoundCollection:
    """Sets the process's objects aside after each round of at least `min_nodes` nodes."""

    def __init__(self, full_every_s: float = FULL_COLLECTION_S, min_nodes: int = MIN_NODES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.full_every_s = full_every_s
        self.min_nodes = min_nodes
        self._clock = clock
        self._last_full = clock()
        self.frozen = False  # whether objects are set aside by this collection
        self.full_collections = 0
        self._kept = 0  # summaries kept since objects were last set aside

    def kept(self, nodes: int) -> None:
        """Called for each node summary kept during a round, with the cluster's node count."""
        self._kept += 1
        if self._kept >= SET_ASIDE_EVERY and nodes >= self.min_nodes and gc.isenabled():
            self._set_aside()

    def _set_aside(self) -> None:
        gc.freeze()
        self.frozen = True
        self._kept = 0

    def after_round(self, nodes: int) -> None:
        """Called once a round's view is published, with the round's node count."""
        if not gc.isenabled():  # the process manages collection itself
            return
        if nodes < self.min_nodes:
            if self.frozen:  # the cluster shrank: collect as usual again
                gc.unfreeze()
                self.frozen = False
            return
        now = self._clock()
        if self.frozen and now - self._last_full >= self.full_every_s:
            gc.unfreeze()
            gc.collect()
            self._last_full = now
            self.full_collections += 1
        self._set_aside()

    def release(self) -> None:
        """Give what was set aside back to the collector (the collector stopped)."""
        if self.frozen:
            gc.unfreeze()
            self.frozen = False
