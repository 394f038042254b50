"""RaySources against a real local Ray cluster with token authentication on.

The module starts one head node (2 CPUs, 4 GPU slots; its raylet sees
CUDA_VISIBLE_DEVICES=3,1,0,2) under a Ray temp dir of its own, and a driver
that holds a 1-GPU actor running a long `Trainer.step`, two 0.5-GPU actors, a
1-GPU actor in a placement group and a long 1-GPU task. Each of them writes the
ids it sees from inside (runtime context, pid, `ray.get_gpu_ids()`), which the
tests compare with what RaySources reads from outside. A second node of the
same cluster joins on this machine for the multi-node tests.

Teardown stops this module's Ray processes by pid (found by their temp dir
and GCS address), not with `ray stop`, which would stop every Ray cluster on
the machine, other test sessions' included, and restores the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest
from ray._common.network_utils import find_free_port
from ray.core.generated import node_manager_pb2, node_manager_pb2_grpc

from ray_accel.demo.local_cluster import (
    LocalRayCluster,
    pid_of,
)
from ray_accel.exporter.attribution.ray_sources import (
    VISIBLE_DEVICE_VARIABLES,
    RayNotFound,
    RaySourceError,
    RaySources,
    RayWorkerInfo,
    ResourceGrant,
)
from ray_accel.exporter.attribution.transfers import ActorTask

HEAD_CUDA = ("3", "1", "0", "2")
SECOND_CUDA = (
    "GPU-5c3e2a55-1d7b-4a8e-9d0f-5e2f6b1a7c10",
    "MIG-0f6c1c2a-3b4d-5e6f-7a8b-9c0d1e2f3a4b",
)
STARTUP_TIMEOUT_S = 120

DRIVER = r"""
import json, os, sys, time

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

OUT = sys.argv[2]


def identity():
    ctx = ray.get_runtime_context()
    return {
        "pid": os.getpid(), "job_id": ctx.get_job_id(), "worker_id": ctx.get_worker_id(),
        "actor_id": ctx.get_actor_id() or "", "task_id": ctx.get_task_id(),
        "node_id": ctx.get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
    }


def write(name, data):
    with open(os.path.join(OUT, name + ".tmp"), "w") as out:
        json.dump(data, out)
    os.rename(os.path.join(OUT, name + ".tmp"), os.path.join(OUT, name))


@ray.remote(num_gpus=1, num_cpus=0, max_concurrency=2)
class Trainer:
    def identity(self):
        return identity()

    def step(self):
        write("step.json", identity())
        time.sleep(3600)


@ray.remote(num_gpus=0.5, num_cpus=0)
class Half:
    def identity(self):
        return identity()


@ray.remote(num_gpus=1, num_cpus=0)
class InGroup:
    def identity(self):
        return identity()


@ray.remote(num_gpus=1, num_cpus=0)
def long_task():
    write("task.json", identity())
    time.sleep(3600)


ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
trainer = Trainer.options(name="trainer-1").remote()
halves = [Half.options(name=f"half-{i}").remote() for i in range(2)]
group = placement_group([{"GPU": 1}])
ray.get(group.ready(), timeout=60)
in_group = InGroup.options(
    scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)
).remote()
reports = {
    "trainer": ray.get(trainer.identity.remote(), timeout=120),
    "halves": ray.get([h.identity.remote() for h in halves], timeout=120),
    "in_group": ray.get(in_group.identity.remote(), timeout=120),
    "driver": identity(),
}
step = trainer.step.remote()
task = long_task.remote()
write("reports.json", reports)
sys.stdin.read()  # stay alive, holding everything, until the test closes stdin
"""


@dataclass(frozen=True)
class Cluster:
    root: Path
    env: dict[str, str]
    gcs_address: str
    local: LocalRayCluster

    @property
    def address_file(self) -> Path:
        return self.root / "ray" / "ray_current_cluster"


@dataclass(frozen=True)
class Workload:
    reports: dict
    step: dict
    task: dict

    @property
    def gpu_holders(self) -> list[dict]:
        """The identities of every worker holding GPU slots."""
        return [
            self.reports["trainer"],
            *self.reports["halves"],
            self.reports["in_group"],
            self.task,
        ]


# ------------------------------------------------------------------ processes


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is in the stopped state (T in /proc's stat)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        if stat[stat.rindex(")") + 2] != "T":
            return False
    return True


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    """Freeze a process (SIGSTOP) for the block: it holds its sockets but answers nothing.

    The block starts once every thread of it is stopped: on a loaded machine a thread may
    take a while to be scheduled and reach the stop."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10
        while not _all_threads_stopped(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"process {pid} did not stop within 10 s")
            time.sleep(0.01)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _wait_for_files(paths: list[Path], process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not all(p.exists() for p in paths):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"driver did not report:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


# ------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    local = LocalRayCluster(prefix="rs-")
    try:
        local.start_head(
            {"CUDA_VISIBLE_DEVICES": ",".join(HEAD_CUDA), "RAY_NODE_ZONE": "test-zone-a"},
            "--num-cpus=2", "--num-gpus=4", "--labels=role=head,team=ray-accel",
        )
        yield Cluster(local.root, local.env, local.gcs_address, local)
    finally:
        local.stop()


@pytest.fixture(scope="module")
def workload(cluster: Cluster) -> Iterator[Workload]:
    out = cluster.root / "out"
    out.mkdir()
    script = cluster.root / "driver.py"
    script.write_text(DRIVER)
    log = cluster.root / "driver.log"
    with open(log, "w") as log_file:
        driver = subprocess.Popen(
            [sys.executable, str(script), cluster.gcs_address, str(out)],
            env=cluster.env,
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        names = ("reports.json", "step.json", "task.json")
        _wait_for_files([out / n for n in names], driver, log)
        reports, step, task = (json.loads((out / n).read_text()) for n in names)
        yield Workload(reports, step, task)
    finally:
        driver.stdin.close()
        try:
            driver.wait(timeout=15)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()


@pytest.fixture(scope="module")
def sources(cluster: Cluster, workload: Workload) -> Iterator[RaySources]:
    with RaySources.discover(cluster.gcs_address) as found:
        yield found


@pytest.fixture(scope="module")
def second_node(cluster: Cluster, workload: Workload) -> str:
    """A second node of the cluster on this machine, started once everything is placed."""
    return cluster.local.add_node(
        {"CUDA_VISIBLE_DEVICES": ",".join(SECOND_CUDA)}, "--num-cpus=0", "--num-gpus=2",
        "--labels=role=second",
    )


# ---------------------------------------------------------------------- helpers


def _by_pid(workers: list[RayWorkerInfo]) -> dict[int, RayWorkerInfo]:
    return {w.pid: w for w in workers}


def _devices(grants: tuple[ResourceGrant, ...], visible: tuple[str, ...]) -> list[str]:
    """The raylet's device entries behind GPU slots, as Ray maps them for the worker."""
    return [visible[grant.slot] for grant in grants]


def _detail_once_running(sources: RaySources, task_id: str) -> ActorTask | None:
    # Workers report task state changes to the GCS about once a second.
    deadline = time.monotonic() + 30
    while True:
        detail = sources.task_detail(task_id)
        if (detail is not None and detail.running) or time.monotonic() > deadline:
            return detail
        time.sleep(0.5)


# ------------------------------------------------------------------------ tests


def test_discover_without_ray_raises_ray_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(RayNotFound, match="no Ray node runs on this host"):
        RaySources.discover(timeout_s=2)

    # An address left behind by a stopped cluster is not a running node either.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")
    with pytest.raises(RayNotFound, match="no raylet of that cluster"):
        RaySources.discover(timeout_s=2)


@pytest.mark.ray
def test_discover_finds_the_head_node(cluster: Cluster, workload: Workload):
    node_id = workload.reports["trainer"]["node_id"]
    with RaySources.discover() as found:
        node = found.node
    assert node.node_id == node_id
    assert node.gcs_address == cluster.gcs_address
    assert node.node_ip == cluster.gcs_address.rpartition(":")[0]
    assert node.raylet_address.startswith(node.node_ip + ":")
    assert node.raylet_address != cluster.gcs_address
    assert Path(node.session_dir).is_dir()
    assert Path(node.session_dir).parent == cluster.root / "ray"
    assert node.labels["role"] == "head"
    assert node.labels["team"] == "ray-accel"
    assert node.labels["ray.io/node-id"] == node_id
    assert node.labels["ray.io/availability-zone"] == "test-zone-a"
    assert dict(node.visible_devices) == {
        name: HEAD_CUDA if name == "CUDA_VISIBLE_DEVICES" else None
        for name in VISIBLE_DEVICE_VARIABLES
    }


@pytest.mark.ray
def test_discover_by_address_env_and_raylet_scan(cluster: Cluster, workload, monkeypatch):
    node_id = workload.reports["trainer"]["node_id"]
    with RaySources.discover(cluster.gcs_address) as found:
        assert found.node.node_id == node_id

    # RAY_ADDRESS wins when no address is given, whatever the temp dir says.
    monkeypatch.setenv("RAY_ADDRESS", cluster.gcs_address)
    monkeypatch.setenv("RAY_TMPDIR", tempfile.gettempdir() + "/no-ray-here")
    with RaySources.discover() as found:
        assert found.node.node_id == node_id
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("RAY_TMPDIR", str(cluster.root))

    # Without the recorded address (clusters made by ray.init() write none), the
    # raylets using this Ray temp dir name the cluster.
    hidden = cluster.address_file.with_name("hidden")
    cluster.address_file.rename(hidden)
    try:
        with RaySources.discover() as found:
            assert found.node.node_id == node_id
    finally:
        hidden.rename(cluster.address_file)


@pytest.mark.ray
def test_cluster_enforces_token_auth(sources: RaySources):
    # Guards the other tests' premise: without Ray's token the raylet says no.
    with grpc.insecure_channel(sources.node.raylet_address) as channel:
        stub = node_manager_pb2_grpc.NodeManagerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetNodeStats(node_manager_pb2.GetNodeStatsRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.ray
def test_workers_carry_the_ids_seen_inside(sources: RaySources, workload: Workload):
    workers = _by_pid(sources.workers())
    for inside in [*workload.gpu_holders, workload.reports["driver"]]:
        worker = workers[inside["pid"]]
        assert worker.worker_id == inside["worker_id"]
        assert worker.job_id == inside["job_id"]
        assert worker.actor_id == inside["actor_id"]
    assert workers[workload.reports["driver"]["pid"]].worker_type == "DRIVER"
    assert workers[workload.task["pid"]].worker_type == "WORKER"
    assert workers[workload.task["pid"]].actor_id == ""


@pytest.mark.ray
def test_gpu_slots_map_to_the_devices_workers_see(sources: RaySources, workload: Workload):
    workers = _by_pid(sources.workers())
    visible = sources.node.visible_devices["CUDA_VISIBLE_DEVICES"]
    for inside in workload.gpu_holders:
        grants = workers[inside["pid"]].grants["GPU"]
        assert _devices(grants, visible) == inside["gpu_ids"], inside
    wholes = [workload.reports["trainer"], workload.reports["in_group"], workload.task]
    whole_grants = [workers[inside["pid"]].grants["GPU"] for inside in wholes]
    assert all([g.quantity for g in grants] == [1.0] for grants in whole_grants)
    halves = [workers[inside["pid"]].grants["GPU"] for inside in workload.reports["halves"]]
    assert halves[0] == halves[1]
    assert [g.quantity for g in halves[0]] == [0.5]
    # Four holders of whole slots, four distinct slots: every entry of the
    # permuted list is exercised, most of them with slot != device index.
    slots = {grants[0].slot for grants in [*whole_grants, halves[0]]}
    assert slots == {0, 1, 2, 3}


@pytest.mark.ray
def test_placement_group_grants_fold_into_the_base_resource(
    sources: RaySources, workload: Workload
):
    in_group = _by_pid(sources.workers())[workload.reports["in_group"]["pid"]]
    # Raw stats hold GPU_group_<pg>, GPU_group_0_<pg> and bundle_group_* entries.
    assert dict(in_group.grants) == {"GPU": in_group.grants["GPU"]}
    assert len(in_group.grants["GPU"]) == 1


@pytest.mark.ray
def test_actor_class_and_name(sources: RaySources, workload: Workload):
    workers = _by_pid(sources.workers())
    expected = {
        workload.reports["trainer"]["pid"]: ("Trainer", "trainer-1"),
        workload.reports["halves"][0]["pid"]: ("Half", "half-0"),
        workload.reports["halves"][1]["pid"]: ("Half", "half-1"),
        workload.reports["in_group"]["pid"]: ("InGroup", ""),
        workload.task["pid"]: ("", ""),
    }
    for pid, names in expected.items():
        assert (workers[pid].actor_class, workers[pid].actor_name) == names


@pytest.mark.ray
def test_an_idle_actors_record_is_made_once(sources: RaySources, workload: Workload):
    """Its `CoreWorkerStats` come back byte for byte the same, so its record (named) is
    the one made before (tests/test_attribution_worker_records.py: changed stats)."""
    first = _by_pid(sources.workers())
    second = _by_pid(sources.workers())
    halves = [inside["pid"] for inside in workload.reports["halves"]]
    for pid in halves:
        assert second[pid] is first[pid]
        assert second[pid].actor_class == "Half"


@pytest.mark.ray
def test_workers_name_the_tasks_they_run(sources: RaySources, workload: Workload):
    workers = _by_pid(sources.workers())
    step, task = workload.step, workload.task
    # The Trainer runs `step` (its finished identity() calls are gone); the task's worker its task.
    assert sources.running_task_ids(workers[step["pid"]]) == (step["task_id"],)
    assert sources.running_task_ids(workers[task["pid"]]) == (task["task_id"],)
    idle_half = workers[workload.reports["halves"][0]["pid"]]
    assert sources.running_task_ids(idle_half) == ()
    # Counts that move when a task starts or ends, so unchanged workers need not be asked.
    executed, running = workers[step["pid"]].task_counts
    assert running == 1 and executed >= 2


@pytest.mark.ray
def test_task_detail_says_what_a_running_task_is(sources: RaySources, workload: Workload):
    step, task = workload.step, workload.task
    detail = _detail_once_running(sources, step["task_id"])
    assert (detail.name, detail.state, detail.actor_id, detail.job_id, detail.pid) == (
        "Trainer.step", "RUNNING", step["actor_id"], step["job_id"], step["pid"])
    assert detail.started_at is not None and not detail.is_system_call
    plain = _detail_once_running(sources, task["task_id"])
    assert (plain.name, plain.actor_id, plain.pid) == ("long_task", "", task["pid"])
    assert sources.task_detail("ab" * 24) is None


@pytest.mark.ray
def test_a_reply_from_another_worker_is_refused(sources: RaySources, workload: Workload):
    trainer = _by_pid(sources.workers())[workload.step["pid"]]
    impostor = replace(trainer, worker_id="ab" * 28)
    with pytest.raises(RaySourceError, match="answered instead"):
        sources.running_task_ids(impostor)


@pytest.mark.ray
def test_frozen_worker_times_out_then_recovers(sources: RaySources, workload: Workload):
    trainer = _by_pid(sources.workers())[workload.step["pid"]]
    with _stopped(trainer.pid), pytest.raises(RaySourceError, match=r"worker .* no answer"):
        sources.running_task_ids(trainer, timeout_s=1)
    assert sources.running_task_ids(trainer) == (workload.step["task_id"],)


@pytest.mark.ray
def test_unreachable_address_fails_fast(cluster: Cluster):
    closed = f"{cluster.gcs_address.rpartition(':')[0]}:{find_free_port()}"
    started = time.monotonic()
    with pytest.raises(RaySourceError, match=r"GCS .* unreachable"):
        RaySources.discover(closed, timeout_s=3)
    # A hang guard, not a speed target: a refused connection must not wait out retries.
    assert time.monotonic() - started < 3


@pytest.mark.ray
def test_frozen_raylet_times_out_then_recovers(sources: RaySources, workload: Workload):
    raylet = pid_of("/raylet ", f"--node_id={sources.node.node_id}")
    with _stopped(raylet), pytest.raises(RaySourceError, match=r"raylet .* no answer within"):
        sources.workers(timeout_s=1)
    assert workload.reports["trainer"]["pid"] in _by_pid(sources.workers(timeout_s=5))


@pytest.mark.ray
def test_frozen_gcs_times_out_then_recovers(cluster: Cluster, sources: RaySources, workload):
    gcs = pid_of("/gcs_server ", str(cluster.root))
    trainer_pid = workload.reports["trainer"]["pid"]
    with RaySources.discover(cluster.gcs_address) as fresh:
        with _stopped(gcs):
            with pytest.raises(RaySourceError, match=r"GCS .* no answer within"):
                RaySources.discover(cluster.gcs_address, timeout_s=1)
            # Slots still come from the raylet; names wait for the GCS.
            without_names = _by_pid(fresh.workers(timeout_s=1))[trainer_pid]
        assert without_names.grants["GPU"]
        assert without_names.actor_class == ""
        assert _by_pid(fresh.workers(timeout_s=5))[trainer_pid].actor_class == "Trainer"


@pytest.mark.ray
def test_frozen_dashboard_times_out_then_recovers(cluster: Cluster, sources, workload):
    dashboard = pid_of("dashboard/dashboard.py", str(cluster.root))
    with _stopped(dashboard), pytest.raises(RaySourceError, match="State API"):
        sources.task_detail(workload.task["task_id"], timeout_s=1)
    assert _detail_once_running(sources, workload.task["task_id"]).pid == workload.task["pid"]


@pytest.mark.ray
def test_second_node_on_the_same_host(cluster: Cluster, workload, second_node: str):
    head_id = workload.reports["trainer"]["node_id"]
    with RaySources.discover(node_id=second_node) as second:
        assert second.node.node_id == second_node
        assert second.node.labels["role"] == "second"
        assert second.node.visible_devices["CUDA_VISIBLE_DEVICES"] == SECOND_CUDA
        second_workers = second.workers()
    with RaySources.discover(cluster.gcs_address) as default:
        # Several nodes of the cluster here and none named: the head, as Ray picks.
        assert default.node.node_id == head_id
        assert default.node.raylet_address != second.node.raylet_address
    gpu_pids = {w["pid"] for w in workload.gpu_holders}
    assert gpu_pids.isdisjoint(w.pid for w in second_workers)
    assert not any(w.grants for w in second_workers)
    with pytest.raises(RayNotFound, match="not an alive node"):
        RaySources.discover(cluster.gcs_address, node_id="ab" * 28)


@pytest.mark.ray
def test_closed_sources_refuse_calls(cluster: Cluster, workload):
    found = RaySources.discover(cluster.gcs_address)
    found.close()
    with pytest.raises(RaySourceError, match="closed"):
        found.workers()
    with pytest.raises(RaySourceError, match="closed"):
        found.task_detail(workload.task["task_id"])
