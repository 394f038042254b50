"""Activity judgements on a real Ray cluster with simulated H200s (GPM on).

A trainer, an idle holder and a spinner (busy by NVML, SMs nearly idle: a worker
stuck in a hung collective) each hold a whole GPU. The agent must call the
trainer busy, the idle holder idle (by graphics-engine activity), and the
spinner's GPU spinning, with the spinner's actor id on it, not busy.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent_process import AgentProcess
from ray_workload import holders_by_pid, start_driver

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter import catalog as m
from ray_accel.exporter.activity import SPIN_WINDOW_S
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.contexts import for_real_processes

INTERVAL_S = 0.5


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[tuple[AgentProcess, dict]]:
    hardware = SimulatedHardware.start(for_real_processes("hgx-h200"),
                                       state_dir=tmp_path_factory.mktemp("hw"))
    cluster = LocalRayCluster(prefix="rg-")
    try:
        cluster.start_head(hardware.environ(), "--num-cpus=4")
        driver = start_driver(cluster, tmp_path_factory.mktemp("job"), "trainer,idle,spinner")
        try:
            args = ("--ray-address", cluster.gcs_address, "--interval", str(INTERVAL_S),
                    "--attribution-interval", str(INTERVAL_S))
            with AgentProcess(*args, env=hardware.environ(), ray=True) as agent:
                yield agent, driver.identities
        finally:
            driver.stop()
    finally:
        cluster.stop()
        hardware.close()


def spinning(device: dict) -> float | None:
    values = device["values"].get(m.DEVICE_SPINNING)
    return values[0]["value"] if values else None


def test_trainer_busy_idle_holder_idle_spinner_spinning(setup):
    agent, identities = setup
    pids = {identities[role]["pid"]: role for role in ("trainer", "idle", "spinner")}

    def judged(doc: dict) -> dict[str, tuple[dict, dict]]:
        found = holders_by_pid(doc)
        return {pids[pid]: entry for pid, entry in found.items() if pid in pids}

    doc = agent.wait_for(lambda d: len(judged(d)) == 3 and spinning(judged(d)["spinner"][1])
                         == 1.0, timeout=SPIN_WINDOW_S + 90)
    held = judged(doc)
    trainer, trainer_device = held["trainer"]
    idle, _ = held["idle"]
    spinner, spinner_device = held["spinner"]
    assert (trainer["idle"], trainer["spinning"], trainer["idle_rule"]) == (False, False,
                                                                             "activity")
    assert trainer["activity"]["graphics"] == pytest.approx(0.85)  # the trainer's 85 %
    assert spinning(trainer_device) == 0.0
    assert idle["idle"] is True
    assert (spinner["idle"], spinner["spinning"]) == (False, True)
    assert spinner["ray_actor_id"] == identities["spinner"]["actor_id"]
    busy = {v["labels"]["engine"]: v["value"] for v in spinner_device["values"][m.ACTIVITY]}
    assert busy["graphics"] == pytest.approx(1.0) and busy["sm"] == pytest.approx(0.02)
