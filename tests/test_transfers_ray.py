"""RDT transfers end to end: a real gloo transfer between two actors on a real local cluster.

The head node runs on simulated H200s, so the producer and the consumer each
hold one (simulated) GPU. The agent on the head pairs the cluster's transfers.
A stall is provoked the way one happens in real life: the consumer's
`_ray_system` thread (where RDT receives run) is held by another `__ray_call__`,
so the producer's send hangs. The agent must report it, with both actors and
their devices, long before Ray's 60 s timeout kills the actors.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import rdt_cluster
from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text
from rdt_cluster import STALL_AFTER_S, RdtDriver, rdt_head, transfer_agent

from ray_accel.demo.local_cluster import LocalRayCluster

pytest.importorskip("torch")
hardware, driver = rdt_cluster.hardware, rdt_cluster.driver  # shared fixtures

RAY_TIMEOUT_S = 60


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster(hardware) -> Iterator[LocalRayCluster]:
    with rdt_head(hardware, "rt-") as local:
        yield local


@pytest.fixture(scope="module")
def agent(cluster, hardware) -> Iterator[AgentProcess]:
    with transfer_agent(cluster, hardware) as running:
        yield running


def transfer_series(agent: AgentProcess, name: str) -> list:
    _, _, body = agent.get("/metrics")
    return [s for f in parse_text(body.decode()) for s in f.samples if s.name == name]


def device_uuid(doc: dict, identity: dict) -> str:
    (index,) = identity["gpu_ids"]  # the raylet sees every GPU: slot i is device i
    return next(d["uuid"] for d in doc["devices"] if d["index"] == index)


def test_healthy_stream_never_counts_as_stalled(agent, driver):
    agent.wait_for(lambda d: any(s["name"] == "transfers" and s["up"]
                                 for s in d["attribution"]["sources"]), timeout=60)
    driver.send("stream 300")
    stalled_seen = []
    deadline = time.monotonic() + 120
    while True:
        stalled = [s for s in transfer_series(agent, "ray_accelerator_transfer_stalled")
                   if s.value > 0]
        if stalled:
            stalled_seen.append((stalled, agent.json("/api/v1/snapshot")["transfers"]))
        if driver.process.stdout.readable() and _said(driver, "streamed"):
            break
        assert time.monotonic() < deadline, "stream did not finish"
    assert stalled_seen == []  # on failure: the series and the agent's transfers


def _said(driver: RdtDriver, word: str) -> bool:
    import select

    ready, _, _ = select.select([driver.process.stdout], [], [], 0.3)
    return bool(ready) and driver.process.stdout.readline().strip() == word


def test_stalled_transfer_names_both_actors_and_devices_before_ray_kills_them(agent, driver,
                                                                             cluster):
    producer, consumer = driver.identities["producer"], driver.identities["consumer"]
    driver.send("stall 30")
    driver.expect("stalled")
    started = time.monotonic()
    found = None
    while found is None:
        assert time.monotonic() - started < RAY_TIMEOUT_S / 2, "stall not reported in time"
        found = next((s for s in transfer_series(agent, "ray_accelerator_transfer_stalled")
                      if s.value >= 1), None)
        time.sleep(0.2)
    seen_after = time.monotonic() - started
    doc = agent.json("/api/v1/snapshot")
    assert found.labels["src_actor_id"] == producer["actor_id"]
    assert found.labels["dst_actor_id"] == consumer["actor_id"]
    assert found.labels["src_actor_class"] == "Producer"
    assert found.labels["dst_actor_class"] == "Consumer"
    assert found.labels["src_devices"] == device_uuid(doc, producer)
    assert found.labels["dst_devices"] == device_uuid(doc, consumer)
    assert found.labels["ray_job_id"] == producer["job_id"]
    # reported within a few seconds of crossing the threshold
    assert seen_after < STALL_AFTER_S + 10
    ages = {s.labels["src_actor_id"]: s.value
            for s in transfer_series(agent, "ray_accelerator_transfer_oldest_age_seconds")}
    assert ages[producer["actor_id"]] > STALL_AFTER_S
    # The node's long-running system calls: the producer's send and the consumer's blocker
    calls = doc["transfers"]["rdt_calls"]
    assert {c["actor_id"] for c in calls} >= {producer["actor_id"], consumer["actor_id"]}
    send = next(c for c in calls if c["actor_id"] == producer["actor_id"])
    assert send["devices"] == [device_uuid(doc, producer)]
    # `ray-accel transfers` pairs the same from outside, devices from the registered agents
    listed = subprocess.run(
        [sys.executable, "-m", "ray_accel.exporter.cli", "transfers", "--address",
         cluster.gcs_address, "--stall-after", str(STALL_AFTER_S), "--json"],
        env=cluster.env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    (cli_view,) = json.loads(listed.stdout)
    assert cli_view["stalled"] and cli_view["src_actor_id"] == producer["actor_id"]
    assert cli_view["dst_devices"] == device_uuid(doc, consumer)
    # The block ends, the transfer completes, and the actors live on
    assert driver.expect("unstalled", timeout=60) == "unstalled"
    agent.wait_for(lambda d: not d["transfers"]["transfers"], timeout=30)


def test_transfer_aborted_by_ray_is_counted(agent, cluster, tmp_path):
    # Ray's monitor runs in the owner (this driver): a short timeout there makes
    # Ray abort the stalled transfer by killing both actors.
    aborting = RdtDriver(cluster, tmp_path, env={"RAY_rdt_fetch_fail_timeout_milliseconds":
                                                  str((STALL_AFTER_S + 5) * 1000)})
    try:
        job_id = aborting.identities["producer"]["job_id"]
        aborting.send("stall 40")
        aborting.expect("stalled")
        assert aborting.expect("stall-failed", timeout=60).startswith("stall-failed")

        def counted(doc: dict) -> bool:
            return doc["transfers"]["aborts"].get(job_id, 0) >= 1

        doc = agent.wait_for(counted, timeout=30)
        aborts = {s.labels["ray_job_id"]: s.value
                  for s in transfer_series(agent, "ray_accelerator_transfer_aborts_total")}
        assert aborts[job_id] == 1
        # the latest aborts keep both actors (the tab's transfer_aborted finding names them)
        (abort,) = [a for a in doc["transfers"]["recent_aborts"] if a["job_id"] == job_id]
        producer, consumer = (aborting.identities[k] for k in ("producer", "consumer"))
        assert abort["source"]["actor_id"] == producer["actor_id"]
        assert abort["destination"]["actor_id"] == consumer["actor_id"]
        assert abort["age_s"] > STALL_AFTER_S and abort["at"] <= time.time()
    finally:
        aborting.stop()
