"""Attribution logic without Ray: slot mapping, idle detection, the task-id cap, refreshes.

The Ray side is a scripted stand-in with the shape of the project's RaySources;
the real one is exercised against a real Ray cluster in test_attribution_ray.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter import catalog as m
from ray_accel.exporter.attribution.guard import TaskIdGuard
from ray_accel.exporter.attribution.join import allocations
from ray_accel.exporter.attribution.model import (
    Attribution,
    Grant,
    Holder,
    RayIdentity,
    SourceStatus,
)
from ray_accel.exporter.attribution.ray_sources import (
    LocalRayNode,
    RayNotFound,
    RaySourceError,
    RayWorkerInfo,
    ResourceGrant,
    RunningTask,
)
from ray_accel.exporter.attribution.refresher import AttributionRefresher
from ray_accel.exporter.attribution.slots import assign_holders, slot_devices
from ray_accel.exporter.attribution.transfers import ActorTask
from ray_accel.exporter.model import (
    BackendStatus,
    Device,
    DeviceSample,
    NodeSnapshot,
    ProcessSample,
    Reading,
    labels_of,
)
from ray_accel.exporter.sinks.json import snapshot_document
from ray_accel.exporter.sinks.prometheus import PrometheusRenderer

GPUS = [Device("nvidia", str(i), f"GPU-{i}{i}{i}{i}-aaaa", "H200") for i in range(4)]
MIG = [Device("nvidia", "0/1/0", "MIG-1111-bbbb", "A100 MIG 3g", parent_uuid="GPU-0000-aaaa"),
       Device("nvidia", "0/2/0", "MIG-2222-bbbb", "A100 MIG 2g", parent_uuid="GPU-0000-aaaa")]


def test_slots_are_physical_indices_when_the_raylet_sees_every_gpu():
    mapping = slot_devices(GPUS, {"CUDA_VISIBLE_DEVICES": None})
    assert mapping == {("GPU", i): f"GPU-{i}{i}{i}{i}-aaaa" for i in range(4)}


def test_slots_follow_the_raylets_visible_list():
    mapping = slot_devices(GPUS, {"CUDA_VISIBLE_DEVICES": ("3", "1")})
    assert mapping == {("GPU", 0): "GPU-3333-aaaa", ("GPU", 1): "GPU-1111-aaaa"}


def test_slots_by_uuid_and_uuid_prefix_including_mig():
    devices = [*GPUS, *MIG]
    mapping = slot_devices(devices, {"CUDA_VISIBLE_DEVICES": ("MIG-2222-bbbb", "GPU-1111",
                                                              "GPU-nope")})
    assert mapping == {("GPU", 0): "MIG-2222-bbbb", ("GPU", 1): "GPU-1111-aaaa"}


# Eight GPUs of a host, host index i on PCI bus 0x10 * (8 - i): index order is not bus order.
HOST = [Device("nvidia", str(i), f"GPU-{i}{i}{i}{i}-cccc", "H200",
               pci_bus_id=f"00000000:{0x10 * (8 - i):02X}:00.0") for i in range(8)]


def test_a_container_given_some_gpus_numbers_them_from_0_in_bus_order():
    # NVIDIA's device plugin gave the Ray container host GPUs 5, 2 and 6 (by UUID)
    given = ("GPU-5555-cccc", "GPU-2222-cccc", "GPU-6666-cccc")
    mapping = slot_devices(HOST, {"NVIDIA_VISIBLE_DEVICES": given, "CUDA_VISIBLE_DEVICES": None})
    # the container's GPU 0 is the one lowest on the bus: host GPU 6
    assert mapping == {("GPU", 0): "GPU-6666-cccc", ("GPU", 1): "GPU-5555-cccc",
                       ("GPU", 2): "GPU-2222-cccc"}
    # Ray's own list inside the container counts in the container's numbers
    mapping = slot_devices(HOST, {"NVIDIA_VISIBLE_DEVICES": ("2", "5", "6"),
                                  "CUDA_VISIBLE_DEVICES": ("2", "0", "7")})
    assert mapping == {("GPU", 0): "GPU-2222-cccc", ("GPU", 1): "GPU-6666-cccc"}
    assert slot_devices(HOST, {"NVIDIA_VISIBLE_DEVICES": ("void",)}) == {}


@pytest.mark.parametrize("given", [("all",), ("/var/run/nvidia-container-devices",),
                                   ("GPU-2222-cccc", "GPU-from-another-host")])
def test_a_container_list_that_names_no_gpus_here_leaves_the_hosts_indices(given):
    mapping = slot_devices(HOST, {"NVIDIA_VISIBLE_DEVICES": given, "CUDA_VISIBLE_DEVICES": None})
    assert mapping == {("GPU", i): f"GPU-{i}{i}{i}{i}-cccc" for i in range(8)}


def test_fractional_holders_share_a_device():
    a, b = RayIdentity(10, actor_id="a"), RayIdentity(11, actor_id="b")
    holders = assign_holders(GPUS, {}, [Grant(b, "GPU", 2, 0.5), Grant(a, "GPU", 2, 0.5),
                                        Grant(a, "CPU", 0, 1.0)])
    assert holders == {"GPU-2222-aaaa": (Holder(a, 0.5), Holder(b, 0.5))}


def _sample(processes=(), util=0.0, up=True, listed=True):
    readings = (Reading(m.GPU_UTILIZATION, util, labels_of({"task": "general"})),)
    return DeviceSample(GPUS[0], up=up, taken_at=0.0, readings=readings if up else (),
                        processes=tuple(processes), processes_listed=listed)


def _proc(pid, sm=None):
    readings = () if sm is None else (
        Reading(m.PROCESS_UTILIZATION, sm, labels_of({"engine": "sm"})),)
    return ProcessSample(pid, readings)


@pytest.mark.parametrize(
    ("processes", "device_util", "idle"),
    [
        ((), 0.9, True),                   # holds the GPU, never created a context
        ((_proc(10, sm=0.0),), 0.9, True),  # context, its engines idle (others busy)
        ((_proc(10, sm=0.3),), 0.3, False),
        ((_proc(10),), 0.5, False),        # no per-process figure: device busy counts
        ((_proc(10),), 0.0, True),
    ],
)
def test_idle_detection(processes, device_util, idle):
    holders = {GPUS[0].uuid: (Holder(RayIdentity(10), 1.0),)}
    (found,) = allocations(_sample(processes, device_util), holders)
    assert found.idle is idle


@pytest.mark.parametrize(("device_util", "idle"), [(0.7, False), (0.0, True)])
def test_without_a_process_list_the_device_tells_idle_holders(device_util, idle):
    # HLML (Gaudi) lists no processes: an empty list must not make every holder idle
    holders = {GPUS[0].uuid: (Holder(RayIdentity(10), 1.0),)}
    (found,) = allocations(_sample((), device_util, listed=False), holders)
    assert found.idle is idle


def test_down_device_has_no_allocations():
    holders = {GPUS[0].uuid: (Holder(RayIdentity(10), 1.0),)}
    assert allocations(_sample(up=False), holders) == []


def test_task_id_guard_caps_per_window_and_counts_drops_once():
    now = [0.0]
    guard = TaskIdGuard(cap=2, window_s=60, clock=lambda: now[0])
    assert [guard.admit(t) for t in ("t1", "t2", "t3", "t3", "t1")] == ["t1", "t2", "", "", "t1"]
    assert guard.dropped == 1 and guard.admitted == 2
    now[0] = 61.0  # the window has passed: room again
    assert guard.admit("t4") == "t4"
    assert guard.admit("") == ""


@dataclass
class ScriptedRay:
    """Stands in for RaySources with the same methods and data shapes."""

    workers_result: list = field(default_factory=list)
    tasks_result: list = field(default_factory=list)
    raylet_error: str = ""
    state_error: str = ""
    asked_workers: list = field(default_factory=list)  # pids asked for their running tasks
    looked_up: list = field(default_factory=list)  # task ids asked of the State API
    node: LocalRayNode = field(default_factory=lambda: LocalRayNode(
        node_id="ab" * 28, node_ip="127.0.0.1", raylet_address="127.0.0.1:1",
        gcs_address="127.0.0.1:2", session_dir="/tmp/s", labels={},
        visible_devices={"CUDA_VISIBLE_DEVICES": ("2", "0")}))

    def workers(self, timeout_s=2.0):
        if self.raylet_error:
            raise RaySourceError(self.raylet_error)
        return self.workers_result

    def running_task_ids(self, worker, timeout_s=2.0):
        self.asked_workers.append(worker.pid)
        return tuple(t.task_id for t in self.tasks_result if t.pid == worker.pid)

    def task_detail(self, task_id, timeout_s=5.0):
        if self.state_error:
            raise RaySourceError(self.state_error)
        self.looked_up.append(task_id)
        task = next((t for t in self.tasks_result if t.task_id == task_id), None)
        return task and ActorTask(task.task_id, task.name, "RUNNING", task.job_id, task.actor_id,
                                  "", self.node.node_id, task.pid, created_at=time.time() - 10,
                                  started_at=time.time() - 10)

    def forget_workers(self, kept):
        pass

    def close(self):
        pass


def _worker(pid, slot, quantity=1.0, actor=""):
    return RayWorkerInfo(pid=pid, worker_id=f"w{pid}", job_id="01000000", actor_id=actor,
                         worker_type="WORKER", grants={"GPU": (ResourceGrant(slot, quantity),)},
                         actor_class="Trainer" if actor else "", actor_name="")


def test_refresher_joins_workers_tasks_and_slots():
    ray = ScriptedRay([_worker(100, 0, actor="act1"), _worker(200, 1, 0.5)],
                      [RunningTask("task-a", "Trainer.step", "01000000", "act1", 100)])
    refresher = AttributionRefresher(lambda: ray)
    first = refresher.refresh()
    # The task's id comes from its worker at once; its name once it is still running.
    assert (first.identity(100).task_id, first.identity(100).task_name) == ("task-a", "")
    assert ray.looked_up == []
    attribution = refresher.refresh()
    assert attribution.node_id == "ab" * 28
    assert [(s.name, s.up) for s in attribution.sources] == [
        ("raylet", True), ("workers", True), ("state_api", True)]
    identity = attribution.identity(100)
    assert (identity.actor_class, identity.task_id, identity.task_name) == (
        "Trainer", "task-a", "Trainer.step")
    holders = assign_holders(GPUS, attribution.visible_devices, attribution.grants)
    assert [h.identity.pid for h in holders["GPU-2222-aaaa"]] == [100]
    assert holders["GPU-0000-aaaa"][0].fraction == 0.5
    # Later refreshes ask neither the workers, whose task counts stand still, nor the head.
    for _ in range(3):
        assert refresher.refresh().identity(100).task_name == "Trainer.step"
    assert (ray.asked_workers, ray.looked_up) == ([100, 200], ["task-a"])


def test_workers_are_asked_again_when_their_tasks_move_and_short_tasks_are_never_looked_up():
    worker = _worker(100, 0)
    ray = ScriptedRay([worker], [RunningTask("t1", "step", "01000000", "", 100)])
    refresher = AttributionRefresher(lambda: ray)
    assert refresher.refresh().identity(100).task_id == "t1"
    for n, task_id in enumerate(("t2", "t3", "t4"), start=1):
        # one short task after another: each seen by one refresh only
        ray.workers_result = [replace(worker, task_counts=(n, 1))]
        ray.tasks_result = [RunningTask(task_id, "step", "01000000", "", 100)]
        assert refresher.refresh().identity(100).task_id == task_id
    assert ray.asked_workers == [100] * 4 and ray.looked_up == []
    ray.workers_result = [replace(worker, task_counts=(4, 0))]
    ray.tasks_result = []
    assert refresher.refresh().identity(100).task_id == ""


def test_refresher_degrades_per_source_and_recovers():
    ray = ScriptedRay([_worker(100, 0)], [RunningTask("t1", "step", "01000000", "", 100)],
                      raylet_error="raylet at 127.0.0.1:1 unreachable")
    refresher = AttributionRefresher(lambda: ray)
    down = refresher.refresh()
    assert down.sources == (SourceStatus("raylet", False, "raylet at 127.0.0.1:1 unreachable"),)
    assert not down.knows_allocations and down.identities == {}
    ray.raylet_error, ray.state_error = "", "state API failed"
    refresher.refresh()
    partial = refresher.refresh()
    # The id still comes from the worker; only the name waits for the State API.
    assert (partial.identity(100).task_id, partial.identity(100).task_name) == ("t1", "")
    assert [(s.name, s.up) for s in partial.sources] == [
        ("raylet", True), ("workers", True), ("state_api", False)]
    ray.state_error = ""
    recovered = refresher.refresh()
    assert all(s.up for s in recovered.sources)
    assert recovered.identity(100).task_name == "step"


def test_a_worker_that_fails_costs_only_its_own_task():
    ray = ScriptedRay([_worker(100, 0), _worker(200, 1)],
                      [RunningTask("t1", "a", "01000000", "", 100),
                       RunningTask("t2", "b", "01000000", "", 200)])
    answer = ray.running_task_ids

    def failing_for_200(worker, timeout_s=2.0):
        if worker.pid == 200:
            raise RaySourceError("worker 200 at 127.0.0.1:9: no answer within 5.0 s")
        return answer(worker, timeout_s)

    ray.running_task_ids = failing_for_200
    attribution = AttributionRefresher(lambda: ray).refresh()
    assert (attribution.identity(100).task_id, attribution.identity(200).task_id) == ("t1", "")
    assert attribution.identity(200).worker_id == "w200"  # still attributed, without its task
    assert SourceStatus("workers", False, "worker 200 at 127.0.0.1:9: no answer within 5.0 s"
                        ) in attribution.sources


def test_refresher_without_ray_reports_discovery_down_and_retries_later():
    calls = []

    def discover():
        calls.append(1)
        raise RayNotFound("no Ray node found on this host")

    refresher = AttributionRefresher(discover, rediscover_s=3600)
    first = refresher.refresh()
    refresher.refresh()
    assert first.sources == (SourceStatus("discovery", False, "no Ray node found on this host"),)
    assert len(calls) == 1


def _attributed_snapshot() -> NodeSnapshot:
    busy, idle = RayIdentity(100, job_id="01000000", worker_id="w100", actor_id="act1",
                             actor_class="Trainer", task_id="t1", task_name="Trainer.step"), \
        RayIdentity(200, job_id="02000000", worker_id="w200", actor_id="act2",
                    actor_class="Idler")
    attribution = Attribution(
        node_id="ab" * 28, refreshed_at=99.0,
        sources=(SourceStatus("raylet", True), SourceStatus("state_api", True)),
        identities={100: busy, 200: idle},
        grants=(Grant(busy, "GPU", 0, 1.0), Grant(idle, "GPU", 1, 1.0)),
        dropped_labels={"ray_task_id": 3},
    )
    samples = tuple(
        DeviceSample(d, True, 99.5, readings=(
            Reading(m.GPU_UTILIZATION, 0.8 if d.index == "0" else 0.0,
                    labels_of({"task": "general"})),),
            processes=(ProcessSample(100, (Reading(m.PROCESS_MEMORY_USAGE, 2**30),)),)
            if d.index == "0" else ())
        for d in GPUS[:3]
    )
    return NodeSnapshot(
        cycle=3, taken_at=100.0, interval_s=1.0, node_labels={"ray_node_id": "ab" * 28},
        backends=(BackendStatus("nvidia", "nvidia", True, 3),), devices=samples,
        attribution=attribution,
        holders=assign_holders([s.device for s in samples], {}, attribution.grants),
    )


def test_prometheus_series_carry_ray_identity_and_allocation():
    body, _ = PrometheusRenderer(include_process_metrics=False).render(
        _attributed_snapshot(), False)
    samples = [s for f in parse_text(body.decode()) for s in f.samples]

    def find(name):
        return {s.labels.get("index"): s for s in samples if s.name == name}

    memory = find("ray_accelerator_process_memory_usage_bytes")["0"]
    assert memory.labels["ray_actor_id"] == "act1" and memory.labels["ray_task_id"] == "t1"
    assert memory.labels["ray_node_id"] == "ab" * 28
    allocation = find("ray_accelerator_allocation_ratio")
    assert allocation["0"].value == 1 and allocation["1"].labels["actor_class"] == "Idler"
    idle = find("ray_accelerator_allocation_idle")
    assert (idle["0"].value, idle["1"].value) == (0, 1)
    allocated = find("ray_accelerator_device_allocated_ratio")
    assert {k: s.value for k, s in allocated.items()} == {"0": 1, "1": 1, "2": 0}
    ups = {s.labels["source"]: s.value for s in samples
           if s.name == "ray_accelerator_attribution_up"}
    assert ups == {"raylet": 1, "state_api": 1}
    dropped = [s for s in samples if s.name == "ray_accelerator_attribution_dropped_labels_total"]
    assert dropped[0].value == 3


def test_json_snapshot_lists_holders():
    doc = snapshot_document(_attributed_snapshot())
    devices = {d["index"]: d for d in doc["devices"]}
    assert devices["1"]["holders"][0]["actor_class"] == "Idler"
    assert devices["1"]["holders"][0]["idle"] is True
    assert devices["0"]["processes"][0]["ray_task_id"] == "t1"
    assert devices["2"]["allocated"] == 0
    assert doc["attribution"]["node_id"] == "ab" * 28


def test_names_can_be_left_out_of_labels():
    ray = ScriptedRay([_worker(100, 0, actor="act1")],
                      [RunningTask("task-a", "Trainer.step", "01000000", "act1", 100)])
    refresher = AttributionRefresher(lambda: ray, names=False)
    refresher.refresh()
    identity = refresher.refresh().identity(100)
    assert (identity.actor_class, identity.actor_name, identity.task_name) == ("", "", "")
    assert (identity.actor_id, identity.task_id) == ("act1", "task-a")
    assert ray.looked_up == []  # without names the head is not asked what tasks are


def test_the_head_is_asked_about_a_few_tasks_a_refresh_and_again_until_it_knows_them():
    ray = ScriptedRay([_worker(100 + n, n) for n in range(6)],
                      [RunningTask(f"t{n}", f"step{n}", "01000000", "", 100 + n) for n in range(6)])
    late = ray.task_detail
    ray.task_detail = lambda task_id, timeout_s=5.0: (
        replace(late(task_id), state="PENDING_NODE_ASSIGNMENT", started_at=None)
        if task_id == "t0" and ray.looked_up.count("t0") < 1 else late(task_id))
    refresher = AttributionRefresher(lambda: ray)
    refresher.refresh()
    second = refresher.refresh()  # four lookups at most; t0's row has not seen it start yet
    assert ray.looked_up == ["t0", "t1", "t2", "t3"]
    assert [second.identity(100 + n).task_name for n in range(6)] == [
        "", "step1", "step2", "step3", "", ""]
    third = refresher.refresh()
    assert ray.looked_up == ["t0", "t1", "t2", "t3", "t0", "t4", "t5"]
    assert [third.identity(100 + n).task_name for n in range(6)] == [
        f"step{n}" for n in range(6)]
