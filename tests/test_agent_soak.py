"""Long soaks, run by `make soak` (excluded from `make test` by the `slow` marker)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text
from ray_workload import start_driver

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.contexts import for_real_processes

pytestmark = [pytest.mark.slow, pytest.mark.ray]
INTERVAL_S = 0.5


def test_fifty_scrapers_for_a_minute():
    with AgentProcess("--simulate", "hgx-h200", "--interval", "1") as agent:
        start = agent.wait_for(lambda d: len(d["devices"]) == 8)
        outcomes: Counter[int] = Counter()
        lock = threading.Lock()
        stop = time.monotonic() + 60

        def scrape() -> None:
            while time.monotonic() < stop:
                status, _, _ = agent.get("/metrics", timeout=10)
                with lock:
                    outcomes[status] += 1

        workers = [threading.Thread(target=scrape) for _ in range(50)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert set(outcomes) == {200}
        assert agent.json("/api/v1/snapshot")["cycle"] >= start["cycle"] + 50


def _series(agent: AgentProcess) -> set[tuple]:
    _, _, body = agent.get("/metrics")
    return {(s.name, tuple(sorted(s.labels.items())))
            for f in parse_text(body.decode()) for s in f.samples}


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@pytest.mark.timeout(9000)  # ~2 h on 2 cores: Ray gives each GPU task a new worker
def test_ten_thousand_short_gpu_tasks_keep_series_and_memory_bounded(tmp_path):
    hardware = SimulatedHardware.start(for_real_processes("hgx-h200"), state_dir=tmp_path / "hw")
    cluster = LocalRayCluster(prefix="sk-")
    try:
        cluster.start_head(hardware.environ(), "--num-cpus=2")
        driver = start_driver(cluster, tmp_path / "job", "idle")
        args = ("--ray-address", cluster.gcs_address, "--interval", str(INTERVAL_S),
                "--attribution-interval", str(INTERVAL_S), "--task-id-cap", "200")
        try:
            with AgentProcess(*args, env=hardware.environ(), ray=True) as agent:
                agent.wait_for(lambda d: len(d["devices"]) == 8 and any(
                    dev.get("holders") for dev in d["devices"]), timeout=60)
                before = _series(agent)
                baseline = len(before)
                rss_before = _rss_kib(agent.proc.pid)
                peak = baseline
                pids: set[int] = set()
                started = time.monotonic()
                for _ in range(20):
                    driver.send("burst 500 0.01")
                    driver.expect("burst-done")
                    burst = json.loads((driver.out / "burst.json").read_text())
                    assert burst["tasks"] == 500
                    pids.update(burst["pids"])
                    peak = max(peak, len(_series(agent)))
                # Ray's workers exit after their task returns, some seconds later
                settle = time.monotonic() + 60
                while len(left := _series(agent)) > baseline + 10 and time.monotonic() < settle:
                    time.sleep(INTERVAL_S)
                after = len(left)
                growth_mib = (_rss_kib(agent.proc.pid) - rss_before) / 1024
                dropped = agent.json("/api/v1/snapshot")["attribution"]["dropped_labels"]
                print(f"10000 tasks in {time.monotonic() - started:.0f} s on {len(pids)} worker"
                      f" processes; series {baseline} before, {peak} at peak, {after} after;"
                      f" agent RSS {growth_mib:+.1f} MiB; task ids dropped"
                      f" {dropped['ray_task_id']}")
        finally:
            driver.stop()
        assert after <= baseline + 10, sorted(left - before)[:20]  # the tasks' series are gone
        assert peak <= baseline + 500      # never more than the concurrent tasks' series
        assert growth_mib < 20
        assert dropped["ray_task_id"] > 0  # the cap kicked in
    finally:
        cluster.stop()
