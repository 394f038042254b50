"""Transfer pairing, stall classification, abort counting and hung-collective detection,
on hand-made State API tasks and device samples (no Ray, no hardware)."""

from __future__ import annotations

import time
from dataclasses import replace

from stepped_clock import SteppedClock

from ray_accel.exporter import catalog as m
from ray_accel.exporter.attribution.model import Attribution, Holder, RayIdentity, SourceStatus
from ray_accel.exporter.attribution.transfers import (
    AbortTracker,
    ActorTask,
    grouped,
    long_running_calls,
    pair_transfers,
)
from ray_accel.exporter.collective import CollectiveStallDetector, CollectiveStallSettings
from ray_accel.exporter.model import Device, DeviceSample, Link, NodeSnapshot, Reading, labels_of
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.patterns import hung_collective
from ray_accel.exporter.simulate.signals import counter_at
from ray_accel.exporter.sinks.json import snapshot_document
from ray_accel.exporter.sinks.prometheus import snapshot_families

DRIVER = "ffffffffffffffffffffffff01000000"
NOW = 1_000_000.0
PRODUCER, CONSUMER, OTHER = "aa" * 16, "bb" * 16, "cc" * 16


def task(task_id: str, actor: str, created: float, started: float | None = None,
         name: str = "", state: str = "", parent: str = DRIVER) -> ActorTask:
    cls = {PRODUCER: "Producer", CONSUMER: "Consumer", OTHER: "Other"}[actor]
    return ActorTask(
        task_id=task_id, name=name or f"{cls}.__ray_call__",
        state=state or ("RUNNING" if started is not None else
                        "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY"),
        job_id="01000000", actor_id=actor, parent_task_id=parent, node_id="n1", pid=1,
        created_at=created, started_at=started)


def stalled_shape(age: float) -> list[ActorTask]:
    """What the State API shows of a hung transfer: the send runs, the receive waits
    behind a blocker on the consumer's system thread, the consumer's task waits."""
    t0 = NOW - age
    return [
        task("blocker", CONSUMER, t0 - 1.5, t0 - 1.5),
        task("consume", CONSUMER, t0 - 0.003, t0, name="Consumer.consume"),
        task("send", PRODUCER, t0, t0),
        task("recv", CONSUMER, t0),
    ]


def test_a_stalled_transfer_is_paired_from_source_to_destination():
    devices = {PRODUCER: ("GPU-a",), CONSUMER: ("GPU-b",)}
    (transfer,) = pair_transfers(stalled_shape(12), NOW, stall_after_s=10,
                                 actor_devices=devices)
    assert transfer.source.task.task_id == "send"
    assert transfer.destination.task.task_id == "recv"
    assert transfer.consumer_task_id == "consume"
    assert transfer.stalled and 11.9 < transfer.age_s < 12.1
    labels = transfer.labels()
    assert labels["src_actor_id"] == PRODUCER and labels["dst_actor_id"] == CONSUMER
    assert labels["src_devices"] == "GPU-a" and labels["dst_devices"] == "GPU-b"
    assert labels["src_actor_class"] == "Producer"


def test_a_young_transfer_is_in_flight_not_stalled():
    (transfer,) = pair_transfers(stalled_shape(2), NOW, stall_after_s=10)
    assert not transfer.stalled


def test_a_transfer_past_the_report_threshold_is_slow():
    ages = {age: pair_transfers(stalled_shape(age), NOW, stall_after_s=10, report_after_s=3)[0]
            for age in (0.01, 2.9, 3.0, 8, 12)}
    assert {age: (t.slow, t.stalled) for age, t in ages.items()} == {
        0.01: (False, False), 2.9: (False, False), 3.0: (True, False), 8: (True, False),
        12: (True, True)}
    # a report threshold above the stall one: a stalled transfer is still slow
    (late,) = pair_transfers(stalled_shape(12), NOW, stall_after_s=10, report_after_s=30)
    assert late.stalled and late.slow


def test_direction_from_the_consumer_even_when_created_in_the_other_order():
    tasks = [task("recv", CONSUMER, NOW - 5), task("send", PRODUCER, NOW - 4.9, NOW - 4.9),
             task("consume", CONSUMER, NOW - 5, NOW - 5, name="Consumer.consume")]
    (transfer,) = pair_transfers(tasks, NOW)
    assert transfer.source.actor_id == PRODUCER


def test_calls_far_apart_or_from_other_owners_are_not_paired():
    tasks = [task("a", PRODUCER, NOW - 20, NOW - 20), task("b", CONSUMER, NOW - 10, NOW - 10),
             task("c", OTHER, NOW - 20, NOW - 20, parent="another-owner")]
    assert pair_transfers(tasks, NOW) == ()


def test_two_transfers_between_the_same_actors_make_one_series():
    tasks = [*stalled_shape(12), task("send2", PRODUCER, NOW - 1, NOW - 1),
             task("recv2", CONSUMER, NOW - 1),
             task("consume2", CONSUMER, NOW - 1, name="Consumer.consume")]
    (group,) = grouped(pair_transfers(tasks, NOW, stall_after_s=10))
    assert (group.in_flight, group.stalled) == (2, 1)
    assert group.oldest_age_s > 11


def test_collective_set_up_calls_without_a_consuming_task_are_no_transfer():
    # create_collective_group runs a `__ray_call__` on every member at once
    tasks = [task("init-a", PRODUCER, NOW - 20, NOW - 20), task("init-b", CONSUMER, NOW - 20,
                                                               NOW - 20)]
    assert pair_transfers(tasks, NOW) == ()
    assert len(long_running_calls(tasks, NOW, report_after_s=1)) == 2


def test_long_running_calls_running_and_pending():
    calls = long_running_calls(stalled_shape(12), NOW, report_after_s=1)
    assert next(c for c in calls if c.task.task_id == "send").state == "RUNNING"
    assert {c.task.task_id for c in calls} == {"blocker", "send", "recv"}
    assert next(c for c in calls if c.task.task_id == "recv").state == "PENDING"


def test_aborts_count_stalled_transfers_that_ended_with_both_actors_dead():
    tracker = AbortTracker(settle_s=5)
    stalled = pair_transfers(stalled_shape(12), NOW, stall_after_s=10)
    assert tracker.update(stalled, NOW) == set()
    assert tracker.aborts == {"01000000": 0}
    actors = tracker.update((), NOW + 1)
    assert actors == {PRODUCER, CONSUMER}
    tracker.settle({PRODUCER: "DEAD", CONSUMER: "ALIVE"}, NOW + 1)  # not yet both
    tracker.settle({PRODUCER: "DEAD", CONSUMER: "DEAD"}, NOW + 2)
    assert tracker.aborts == {"01000000": 1}
    (abort,) = tracker.recent  # kept with both its calls, its age and when it was counted
    assert (abort.job_id, abort.source.actor_id, abort.destination.actor_id) == (
        "01000000", PRODUCER, CONSUMER)
    assert abort.age_s == stalled[0].age_s and abort.at == NOW + 2
    # A stalled transfer that completed (actors alive) is let go, not counted
    tracker.update(stalled, NOW + 3)
    tracker.update((), NOW + 4)
    tracker.settle({PRODUCER: "ALIVE", CONSUMER: "ALIVE"}, NOW + 10)
    assert tracker.update((), NOW + 11) == set()
    assert tracker.aborts == {"01000000": 1}


# ------------------------------------------------------------------ collectives

DEVICE = Device("nvidia", "0", "GPU-0", "NVIDIA H200")


def sample(at: float, utilization: float, nvlink_rate: float | None) -> DeviceSample:
    links = () if nvlink_rate is None else (
        Link("nvlink", 0, rates={"transmit": nvlink_rate, "receive": nvlink_rate}),
        Link("pcie", 0, rates={"transmit": 5e9, "receive": 5e9}))
    return DeviceSample(DEVICE, True, at, readings=(
        Reading(m.GPU_UTILIZATION, utilization, labels_of({"task": "general"})),), links=links)


def verdicts(timeline: list[tuple[float, float | None]], window: float = 10) -> list[bool | None]:
    detector = CollectiveStallDetector(CollectiveStallSettings(window_s=window))
    return [detector.update([sample(i, u, r)]).get("GPU-0")
            for i, (u, r) in enumerate(timeline)]


def test_busy_with_flat_nvlink_for_the_window_is_a_suspected_stall():
    found = verdicts([(0.99, 0.0)] * 12)
    assert found[:10] == [False] * 10 and found[10:] == [True, True]


def test_busy_and_moving_data_is_not_a_stall():
    assert not any(verdicts([(0.99, 9e9)] * 15))


def test_idle_with_flat_counters_is_not_a_stall():
    assert not any(verdicts([(0.0, 0.0)] * 15))


def test_traffic_resuming_clears_the_suspicion():
    found = verdicts([(0.99, 0.0)] * 12 + [(0.99, 9e9)] + [(0.99, 0.0)] * 3)
    assert found[11] is True and found[12:] == [False] * 4


def test_no_link_rates_no_verdict():
    assert verdicts([(0.99, None)] * 3) == [None] * 3


def test_the_simulated_pattern_stops_counters_without_going_back():
    hw = SimulatedHardware.start("hgx-h200")
    try:
        scenario = hw.scenario
        hung = hung_collective(scenario, [0, 1], at_s=37.5)
        before = scenario["devices"][0]["fields"]["138"]["*"]
        after = hung["devices"][0]["fields"]["138"]["*"]
        assert counter_at(after, 37.5) == counter_at(after, 1000) == counter_at(before, 37.5)
        assert after["rate_per_s"] == 0
        assert hung["devices"][0]["utilization_gpu_percent"] == 100.0
        assert hung["devices"][2] == scenario["devices"][2]
        hw.update(hung)  # a valid scenario
    finally:
        hw.close()


# ------------------------------------------------------------------ sinks


def test_sinks_export_transfers_calls_and_suspected_stalls():
    transfers = pair_transfers(stalled_shape(12), NOW, stall_after_s=10)
    calls = tuple(c for c in long_running_calls(stalled_shape(12), NOW, 1)
                  if c.task.actor_id == PRODUCER)  # this node's: the producer's
    holder = Holder(RayIdentity(pid=7, job_id="01000000", actor_id=PRODUCER,
                                actor_class="Producer"), 1.0)
    attribution = Attribution(node_id="n1", sources=(SourceStatus("raylet", True),),
                              rdt_calls=calls, transfers=transfers, pairs_transfers=True,
                              transfers_listed_at=NOW - 3,
                              transfer_aborts={"01000000": 0}, refreshed_at=time.time())
    snapshot = NodeSnapshot(cycle=1, taken_at=NOW, interval_s=1, node_labels={},
                            backends=(), devices=(sample(NOW, 0.99, 0.0),),
                            attribution=attribution, holders={"GPU-0": (holder,)},
                            collective_stalls={"GPU-0": True})
    samples = {s.name: s for f in snapshot_families(snapshot) for s in f.samples}
    stalled = samples["ray_accelerator_transfer_stalled"]
    assert stalled.value == 1
    assert stalled.labels["src_devices"] == "GPU-0" and stalled.labels["dst_devices"] == ""
    assert samples["ray_accelerator_transfer_aborts_total"].value == 0
    assert samples["ray_accelerator_transfer_listing_age_seconds"].value == 3
    assert samples["ray_accelerator_rdt_call_age_seconds"].labels["devices"] == "GPU-0"
    suspected = samples["ray_accelerator_collective_suspected_stall"]
    assert suspected.value == 1 and suspected.labels["ray_actor_id"] == PRODUCER
    doc = snapshot_document(snapshot)
    assert doc["devices"][0]["collective_suspected_stall"] is True
    assert doc["transfers"]["transfers"][0]["source"]["devices"] == ["GPU-0"]
    assert doc["transfers"]["rdt_calls"][0]["task_id"] == "send"
    assert doc["transfers"]["listed_at"] == NOW - 3


# ------------------------------------------------------------------ refresher


class ScriptedCluster:
    """Stands in for RaySources: one head node with the producer, the State API's tasks
    (the producer's worker runs those of its actor that have started)."""

    def __init__(self, tasks: list[ActorTask]) -> None:
        from ray_accel.exporter.attribution.ray_sources import (
            LocalRayNode,
            RayWorkerInfo,
            ResourceGrant,
        )

        self.node = LocalRayNode(node_id="n1", node_ip="127.0.0.1", raylet_address="x:1",
                                 gcs_address="x:2", session_dir="/tmp/s", labels={},
                                 visible_devices={"CUDA_VISIBLE_DEVICES": None}, is_head=True)
        self.tasks = tasks
        self.listings = 0  # actor_tasks calls
        self.clock: SteppedClock | None = None  # moved by `listing_s` per listing
        self.listing_s = 0.0
        self.listing_error: Exception | None = None
        self.states: dict[str, str] = {}
        self._workers = [RayWorkerInfo(pid=7, worker_id="w7", job_id="01000000",
                                       actor_id=PRODUCER, worker_type="WORKER",
                                       grants={"GPU": (ResourceGrant(0, 1.0),)},
                                       actor_class="Producer")]

    def workers(self, timeout_s=2.0):
        return self._workers

    def running_task_ids(self, worker, timeout_s=2.0):
        return tuple(t.task_id for t in self.tasks if t.actor_id == worker.actor_id and t.running)

    def task_detail(self, task_id, timeout_s=5.0):
        return next((t for t in self.tasks if t.task_id == task_id), None)

    def forget_workers(self, kept):
        pass

    def actor_tasks(self, timeout_s=5.0):
        self.listings += 1
        if self.clock is not None:
            self.clock.now += self.listing_s  # what the listing takes the head
        if self.listing_error is not None:
            raise self.listing_error
        return self.tasks

    def actor_states(self, actor_ids, timeout_s=2.0):
        return {a: self.states[a] for a in actor_ids if a in self.states}

    def close(self):
        pass


def test_refresher_reports_calls_pairs_on_the_head_and_counts_aborts():
    from ray_accel.exporter.attribution.refresher import AttributionRefresher, TransferSettings

    now = time.time()
    shape = [task(t.task_id, t.actor_id, t.created_at - NOW + now,
                  None if t.started_at is None else t.started_at - NOW + now,
                  name=t.name, state=t.state) for t in stalled_shape(12)]
    ray = ScriptedCluster(shape)
    refresher = AttributionRefresher(lambda: ray, transfers=TransferSettings(stall_after_s=10))
    refresher.refresh()  # a call is looked up once a second refresh sees it running
    first = refresher.refresh()
    assert [c.task.task_id for c in first.rdt_calls] == ["send"]  # only this node's actor
    (transfer,) = first.transfers
    assert transfer.stalled and first.pairs_transfers
    # the agent's --transfer-report-after decides which transfers are slow
    ray.tasks = [replace(t, created_at=t.created_at + 8,
                         started_at=None if t.started_at is None else t.started_at + 8)
                 for t in shape]  # 4 s old
    for report_after_s, slow in [(3.0, True), (5.0, False)]:
        watcher = AttributionRefresher(lambda: ray, transfers=TransferSettings(
            stall_after_s=10, report_after_s=report_after_s))
        (young,) = watcher.refresh().transfers
        assert (young.slow, young.stalled) == (slow, False), report_after_s
    ray.tasks = shape
    ray.tasks, ray.states = [], {PRODUCER: "DEAD", CONSUMER: "DEAD"}
    assert refresher.refresh().transfer_aborts == {"01000000": 1}
    ray.node = replace(ray.node, is_head=False)
    refresher = AttributionRefresher(lambda: ray, transfers=TransferSettings())
    ray.tasks = shape
    assert refresher.refresh().transfers == ()  # only the head's agent pairs, by default
    assert ray.listings == 5  # and only it lists the cluster's actor tasks


def test_slow_listings_are_paced_and_the_transfers_stand_as_listed_between_them():
    from ray_accel.exporter.attribution.pairing_pace import MOST_WAIT_S, PACE
    from ray_accel.exporter.attribution.ray_errors import RaySourceError
    from ray_accel.exporter.attribution.refresher import AttributionRefresher, TransferSettings

    ray = ScriptedCluster(stalled_shape(12))
    ray.clock, ray.listing_s = SteppedClock(100.0), 0.5  # a head with many tasks in flight
    refresher = AttributionRefresher(lambda: ray, transfers=TransferSettings(stall_after_s=10),
                                     clock=ray.clock)
    first = refresher.refresh()
    assert ray.listings == 1 and len(first.transfers) == 1 and first.transfers_listed_at
    ray.tasks = []  # the transfer ends; the next listing is due 10 listings' time after
    ray.clock.now += PACE * ray.listing_s - 0.1
    between = refresher.refresh()
    assert ray.listings == 1  # not due yet: the transfer stands as listed, and says when
    assert between.transfers == first.transfers
    assert between.transfers_listed_at == first.transfers_listed_at
    assert ("transfers", True) in [(s.name, s.up) for s in between.sources]
    ray.clock.now += 0.1
    after = refresher.refresh()
    assert ray.listings == 2 and after.transfers == ()
    assert after.transfers_listed_at >= first.transfers_listed_at
    # a quick head is listed every refresh
    ray.listing_s = 0.0
    ray.clock.now += PACE * 0.5  # past the last slow listing's pace
    for _ in range(3):
        refresher.refresh()
    assert ray.listings == 5
    # a failed listing leaves no transfers standing and no listing time
    ray.listing_error = RaySourceError("State API at x failed to list tasks: timed out")
    failed = refresher.refresh()
    assert failed.transfers == () and failed.transfers_listed_at == 0.0
    assert ("transfers", False) in [(s.name, s.up) for s in failed.sources]
    # one that timed out after 5 s is asked again within the most a wait can be, not 50 s
    ray.listing_s = 5.0
    refresher.refresh()
    ray.clock.now += MOST_WAIT_S
    refresher.refresh()
    assert ray.listings == 8


def test_an_agent_that_does_not_pair_finds_its_calls_without_listing_the_cluster():
    from ray_accel.exporter.attribution.refresher import AttributionRefresher, TransferSettings

    ray = ScriptedCluster([task("send", PRODUCER, time.time() - 20, time.time() - 20),
                           task("queued", PRODUCER, time.time() - 20)])
    ray.node = replace(ray.node, is_head=False)
    refresher = AttributionRefresher(lambda: ray, transfers=TransferSettings())
    assert refresher.refresh().rdt_calls == ()  # seen running once: not looked up yet
    attribution = refresher.refresh()
    # Its own running call, from its worker and one lookup; a pending one is the pairing
    # agent's to see.
    assert [c.task.task_id for c in attribution.rdt_calls] == ["send"]
    assert 19 < attribution.rdt_calls[0].age_s < 21
    assert ray.listings == 0 and not attribution.pairs_transfers
    assert {s.name for s in attribution.sources} == {"raylet", "workers", "state_api"}
    ray._workers = [replace(ray._workers[0], actor_id="")]  # a task's worker, no actor
    assert AttributionRefresher(lambda: ray, transfers=TransferSettings()).refresh().rdt_calls == ()
    assert ray.listings == 0


def test_calls_to_aborted_actors_are_no_transfers_and_count_no_second_abort():
    tracker = AbortTracker()
    tracker.update(pair_transfers(stalled_shape(12), NOW, stall_after_s=10), NOW)
    tracker.update((), NOW + 1)
    tracker.settle({PRODUCER: "DEAD", CONSUMER: "DEAD"}, NOW + 1)
    # Ray destroys the collective group with a `__ray_call__` to each dead actor
    cleanup = pair_transfers([task("d1", PRODUCER, NOW - 11), task("d2", CONSUMER, NOW - 11),
                              task("c", CONSUMER, NOW - 11, name="Consumer.consume")],
                             NOW + 1, stall_after_s=10)
    assert cleanup and tracker.alive(cleanup) == ()
    tracker.update(cleanup, NOW + 2)
    tracker.update((), NOW + 3)
    tracker.settle({PRODUCER: "DEAD", CONSUMER: "DEAD"}, NOW + 3)
    assert tracker.aborts == {"01000000": 1}
