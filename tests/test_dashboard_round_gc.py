"""The collector's rounds set the view's objects aside from the cyclic collector (round_gc.py)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from ray_accel.dashboard_module.round_gc import SET_ASIDE_EVERY, RoundCollection


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Cyclic:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collection() -> Iterator[tuple[RoundCollection, Clock]]:
    clock = Clock()
    rounds = RoundCollection(full_every_s=300, min_nodes=500, clock=clock)
    try:
        yield rounds, clock
    finally:
        rounds.release()
        gc.unfreeze()


def _cycle_set_aside(rounds: RoundCollection) -> weakref.ref:
    garbage = Cyclic()
    ref = weakref.ref(garbage)
    rounds.after_round(10_000)
    del garbage
    return ref


def test_a_large_clusters_objects_are_set_aside_after_a_round(collection):
    rounds, _ = collection
    ref = _cycle_set_aside(rounds)
    assert rounds.frozen and gc.get_freeze_count() > 0
    gc.collect()
    assert ref() is not None  # set aside: the collections of the next rounds skip it


def test_the_full_collection_finds_cycles_among_what_was_set_aside(collection):
    rounds, clock = collection
    ref = _cycle_set_aside(rounds)
    clock.now = 299.0
    rounds.after_round(10_000)
    assert ref() is not None and rounds.full_collections == 0
    clock.now = 300.0
    rounds.after_round(10_000)
    assert ref() is None and rounds.full_collections == 1
    assert rounds.frozen  # the survivors set aside again


def test_a_small_cluster_is_collected_as_usual(collection):
    rounds, _ = collection
    frozen_before = gc.get_freeze_count()
    rounds.after_round(499)
    for _ in range(SET_ASIDE_EVERY):
        rounds.kept(499)
    assert not rounds.frozen and gc.get_freeze_count() == frozen_before


def test_a_first_round_sets_aside_every_thousand_summaries_it_keeps(collection):
    rounds, _ = collection
    for _ in range(SET_ASIDE_EVERY - 1):
        rounds.kept(10_000)
    assert not rounds.frozen
    rounds.kept(10_000)
    assert rounds.frozen


def test_a_shrunk_cluster_and_a_stopped_collector_give_everything_back(collection):
    rounds, _ = collection
    rounds.after_round(10_000)
    rounds.after_round(100)
    assert not rounds.frozen and gc.get_freeze_count() == 0
    rounds.after_round(10_000)
    rounds.release()
    assert not rounds.frozen and gc.get_freeze_count() == 0


def test_a_process_that_disabled_the_collector_is_left_alone(collection):
    rounds, _ = collection
    gc.disable()
    try:
        rounds.after_round(10_000)
        rounds.kept(10_000)
    finally:
        gc.enable()
    assert not rounds.frozen
