"""Attribution end to end: a real Ray cluster on simulated GPUs, a real workload, the agent.

The head node's raylet runs on simulated H200s and sees them in a permuted
order (CUDA_VISIBLE_DEVICES=7,5,3,1,0,2,4,6), so slot-to-device mapping is
really exercised. The workload's GPU users open simulated CUDA contexts, so
the simulated NVML lists their real pids on the devices Ray assigned them.
Everything the agent exports is compared with what the workers see of
themselves from inside (`ray.get_runtime_context()`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text
from ray_workload import Driver, holders_by_pid, start_driver

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.contexts import for_real_processes

RAYLET_CUDA = ("7", "5", "3", "1", "0", "2", "4", "6")
INTERVAL_S = 0.5
TASK_ID_CAP = 10


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def hardware(tmp_path_factory) -> SimulatedHardware:
    return SimulatedHardware.start(for_real_processes("hgx-h200"),
                                   state_dir=tmp_path_factory.mktemp("hw"))


@pytest.fixture(scope="module")
def cluster(hardware) -> Iterator[LocalRayCluster]:
    local = LocalRayCluster(prefix="ra-")
    try:
        local.start_head({**hardware.environ(), "CUDA_VISIBLE_DEVICES": ",".join(RAYLET_CUDA)},
                         "--num-cpus=4")
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def workload(cluster, tmp_path_factory) -> Iterator[Driver]:
    driver = start_driver(cluster, tmp_path_factory.mktemp("job-a"), "trainer,idle,servers,task")
    yield driver
    driver.stop()


@pytest.fixture(scope="module")
def agent(cluster, hardware, workload) -> Iterator[AgentProcess]:
    args = ("--ray-address", cluster.gcs_address, "--interval", str(INTERVAL_S),
            "--attribution-interval", str(INTERVAL_S / 2), "--task-id-cap", str(TASK_ID_CAP))
    with AgentProcess(*args, env=hardware.environ(), ray=True) as running:
        yield running


def wait_for_holders(agent: AgentProcess, pids: set[int]) -> dict:
    return agent.wait_for(lambda doc: pids <= holders_by_pid(doc).keys(), timeout=60)


def roles(workload: Driver, *names: str) -> list[dict]:
    identities = workload.identities
    return [identities[name] for name in names]


def test_holders_carry_the_ids_workers_see(agent, workload):
    people = roles(workload, "trainer", "idle", "server-a", "server-b", "task")
    doc = wait_for_holders(agent, {p["pid"] for p in people})
    found = holders_by_pid(doc)
    for person in people:
        holder, device = found[person["pid"]]
        assert holder["ray_job_id"] == person["job_id"]
        assert holder["ray_worker_id"] == person["worker_id"]
        assert holder["ray_actor_id"] == person["actor_id"]
        # the worker's own CUDA_VISIBLE_DEVICES entry is the physical device index
        assert [device["index"]] == person["gpu_ids"]
    assert found[people[0]["pid"]][0]["actor_class"] == "Trainer"
    assert doc["node"]["ray_node_id"] == people[0]["node_id"]
    assert doc["node"]["SessionName"].startswith("session_")
    assert doc["node"]["simulated"] == "true"


def test_running_task_is_named_on_its_process(agent, workload):
    (task,) = roles(workload, "task")
    # The id comes from the worker; the name from the State API once the task has run
    # through two refreshes.
    doc = agent.wait_for(lambda d: any(
        p["pid"] == task["pid"] and p["task_name"]
        for dev in d["devices"] for p in dev["processes"]), timeout=60)
    process = next(p for dev in doc["devices"] for p in dev["processes"]
                   if p["pid"] == task["pid"])
    assert process["ray_task_id"] == task["task_id"]
    assert process["task_name"] == "preprocess"
    assert process["ray_job_id"] == task["job_id"]
    assert process["values"]["ray.accelerator.process.memory.usage"][0]["value"] == 4 * 2**30


def test_idle_holder_is_reported_idle_and_busy_ones_not(agent, workload):
    trainer, idle = roles(workload, "trainer", "idle")
    wait_for_holders(agent, {trainer["pid"], idle["pid"]})
    _, _, body = agent.get("/metrics")
    idle_series = {int(s.labels["pid"]): s for f in parse_text(body.decode())
                   for s in f.samples if s.name == "ray_accelerator_allocation_idle"}
    assert idle_series[idle["pid"]].value == 1
    assert idle_series[idle["pid"]].labels["actor_class"] == "IdleHolder"
    assert idle_series[idle["pid"]].labels["ray_actor_id"] == idle["actor_id"]
    assert idle_series[trainer["pid"]].value == 0


def test_fractional_holders_share_one_device(agent, workload):
    a, b = roles(workload, "server-a", "server-b")
    found = holders_by_pid(wait_for_holders(agent, {a["pid"], b["pid"]}))
    (holder_a, device_a), (holder_b, device_b) = found[a["pid"]], found[b["pid"]]
    assert device_a["uuid"] == device_b["uuid"]
    assert holder_a["fraction"] == holder_b["fraction"] == 0.5
    assert device_a["allocated"] == 1.0


def test_two_jobs_are_told_apart(agent, workload, cluster, tmp_path):
    second = start_driver(cluster, tmp_path / "job-b", "trainer")
    try:
        (first_trainer,) = roles(workload, "trainer")
        other = second.identities["trainer"]
        found = holders_by_pid(wait_for_holders(agent, {other["pid"], first_trainer["pid"]}))
        assert other["job_id"] != first_trainer["job_id"]
        assert found[other["pid"]][0]["ray_job_id"] == other["job_id"]
        assert found[first_trainer["pid"]][0]["ray_job_id"] == first_trainer["job_id"]
    finally:
        second.stop()


def test_many_short_tasks_stay_under_the_task_id_cap(agent, workload):
    seen_task_ids: set[str] = set()
    agent.wait_for(lambda doc: doc["cycle"] >= 1, timeout=60)
    workload.send("burst 40 0.4")
    deadline = time.monotonic() + 300
    while not (workload.out / "burst.json").exists():
        assert time.monotonic() < deadline, "burst did not finish"
        _, _, body = agent.get("/metrics")
        for family in parse_text(body.decode()):
            for sample in family.samples:
                if sample.labels.get("ray_task_id"):
                    seen_task_ids.add(sample.labels["ray_task_id"])
        time.sleep(INTERVAL_S / 2)
    workload.expect("burst-done")
    burst = json.loads((workload.out / "burst.json").read_text())
    assert burst["tasks"] == 40
    assert 0 < len(seen_task_ids) <= TASK_ID_CAP
    doc = agent.json("/api/v1/snapshot")
    assert doc["attribution"]["dropped_labels"]["ray_task_id"] > 0


def test_series_of_an_exited_actor_disappear_within_two_cycles(agent, workload):
    (idle,) = roles(workload, "idle")
    wait_for_holders(agent, {idle["pid"]})
    workload.command("kill idle", "killed idle")
    while Path(f"/proc/{idle['pid']}").exists():
        time.sleep(0.05)
    gone_at = agent.json("/api/v1/snapshot")["cycle"]
    doc = agent.wait_for(lambda d: idle["pid"] not in holders_by_pid(d), timeout=30)
    assert doc["cycle"] <= gone_at + 2
    _, _, body = agent.get("/metrics")
    assert f'pid="{idle["pid"]}"' not in body.decode()
