"""Faults the agent must survive without lying: storms, floods, hangs, resets, lost Ray.

Each test names the fault it stands for in docs/reliability.md.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest
from agent_process import AgentProcess, write_scenario
from nvml_scenarios import scenario
from prometheus_client.parser import text_string_to_metric_families as parse_text
from ray_workload import start_driver

from ray_accel.demo.local_cluster import LocalRayCluster, processes
from ray_accel.exporter import catalog as m
from ray_accel.exporter.model import Device, DeviceSample, Link, Reading, labels_of
from ray_accel.exporter.rates import with_link_rates
from ray_accel.exporter.simulate import SimulatedHardware


def _series(body: bytes, name: str) -> list:
    return [s for f in parse_text(body.decode()) for s in f.samples if s.name == name]


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_xid_storm_is_counted_exactly_and_sampling_goes_on(tmp_path):
    doc = scenario(devices=2, freeze_at_s=None)
    storm = [{"at_s": 0.5 + i / 10_000, "xid": 13 if i % 2 else 31} for i in range(4000)]
    doc["devices"][1]["xid_events"] = storm
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2") as agent:
        def counted(doc: dict) -> int:
            values = next(d for d in doc["devices"] if d["index"] == "1")["values"]
            return sum(v["value"] for v in values.get(m.XID_ERRORS, []))

        doc = agent.wait_for(lambda d: len(d["devices"]) == 2 and counted(d) == 4000, timeout=60)
        _, _, body = agent.get("/metrics")
        xids = _series(body, "ray_accelerator_xid_errors_total")
        assert {s.labels["xid"]: s.value for s in xids} == {"13": 2000, "31": 2000}
        assert all(d["up"] for d in doc["devices"])
        cycle = doc["cycle"]
        agent.wait_for(lambda d: d["cycle"] >= cycle + 5)


def test_an_event_wait_that_hangs_holds_up_one_read_only(tmp_path):
    """NVML's event set stops answering while every other call answers: the read that asked
    it is late (that GPU stale, as for any hung call), the other reads do not ask again
    while that ask is in the driver, and they report."""
    doc = scenario(devices=4, freeze_at_s=None)
    doc["delays"] = [{"function": "nvmlEventSetWait_v2", "seconds": 600, "from_s": 1.0}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.3") as agent:
        first = agent.wait_for(lambda d: len(d["devices"]) == 4
                               and sum(x["stale"] for x in d["devices"]) == 1, timeout=30)
        later = agent.wait_for(lambda d: d["cycle"] >= first["cycle"] + 10)
        assert sum(x["stale"] for x in later["devices"]) == 1
        assert sum(x["up"] for x in later["devices"]) == 3
        assert agent.json("/healthz")["status"] == "degraded"


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def test_a_process_list_that_always_asks_for_more_room_keeps_memory_bounded(tmp_path):
    """The driver answers INSUFFICIENT_SIZE for a GPU's process list every time (and with
    the count it was given): the buffer grows to a bound, not by half each call; the list
    is missing from that GPU, everything else reports."""
    doc = scenario(devices=2, freeze_at_s=None)
    doc["errors"] = [{"function": "nvmlDeviceGetComputeRunningProcesses", "device": 1,
                      "code": "INSUFFICIENT_SIZE", "from_s": 1.0}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2") as agent:
        first = agent.wait_for(lambda d: len(d["devices"]) == 2 and any(
            "nvmlDeviceGetComputeRunningProcesses" in error for error in d["devices"][1].get(
                "errors", {})), timeout=30)
        rss = _rss_mib(agent.proc.pid)
        later = agent.wait_for(lambda d: d["cycle"] >= first["cycle"] + 40, timeout=60)
        assert _rss_mib(agent.proc.pid) < rss + 20  # doubling each call: gigabytes by now
        assert all(d["up"] for d in later["devices"])


def test_the_agent_exits_promptly_though_nvml_hangs_in_its_shutdown(tmp_path):
    doc = scenario(devices=2, freeze_at_s=None)
    doc["delays"] = [{"function": "nvmlShutdown", "seconds": 600}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.5") as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 2 and all(x["up"] for x in d["devices"]))
        agent.proc.send_signal(signal.SIGTERM)
        agent.proc.wait(timeout=15)  # TimeoutExpired before: it waited in nvmlShutdown
        output = agent.proc.stdout.read()
    assert "did not close within 2 s" in output


@pytest.mark.parametrize("code", ["RESET_REQUIRED", "GPU_NOT_FOUND", "TIMEOUT"])
def test_a_gpu_that_answers_no_call_is_down_not_up_without_values(tmp_path, code):
    """Every call of GPU 1 fails with a code that alone means only "not this value": the
    GPU answered nothing, so it is down (its counters kept, /healthz degraded naming it),
    not up with its gauges missing; it is up again once it answers."""
    doc = scenario(devices=3, freeze_at_s=None)
    doc["errors"] = [{"function": "*", "device": 1, "code": code, "from_s": 1.0,
                      "until_s": 8.0}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.3") as agent:
        down = agent.wait_for(lambda d: len(d["devices"]) == 3 and not d["devices"][1]["up"],
                              timeout=30)
        assert down["devices"][1]["errors"] == {"every call": code.lower()}
        assert [x["up"] for x in down["devices"]] == [True, False, True]
        health = agent.json("/healthz")
        assert health["status"] == "degraded"
        assert [(p["index"], p["state"]) for p in health["not_answering"]] == [("1", "down")]
        _, _, body = agent.get("/metrics")
        energy = {s.labels["index"] for s in _series(body, "hw_energy_joules_total")}
        assert "1" in energy  # a counter stays, at its last value
        assert "1" not in {s.labels["index"] for s in _series(body, "hw_power_watts")}
        agent.wait_for(lambda d: all(x["up"] for x in d["devices"]), timeout=30)


def test_hung_call_keeps_threads_bounded(tmp_path):
    doc = scenario(devices=3, freeze_at_s=None)
    doc["delays"] = [{"function": "nvmlDeviceGetTemperature", "device": 1, "seconds": 600,
                      "from_s": 1.0}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.1") as agent:
        first = agent.wait_for(lambda d: len(d["devices"]) == 3 and not d["devices"][1]["up"])
        threads = _threads(agent.proc.pid)
        agent.wait_for(lambda d: d["cycle"] >= first["cycle"] + 30)
        assert _threads(agent.proc.pid) <= threads
        status, _, _ = agent.get("/metrics", timeout=2)
        assert status == 200


def test_fifty_concurrent_scrapers(tmp_path):
    with AgentProcess("--simulate", "hgx-h200", "--interval", "0.5") as agent:
        start = agent.wait_for(lambda d: len(d["devices"]) == 8)
        outcomes: Counter[int] = Counter()
        lock = threading.Lock()
        stop = time.monotonic() + 5

        def scrape() -> None:
            while time.monotonic() < stop:
                status, _, body = agent.get("/metrics", timeout=10)
                with lock:
                    outcomes[status if b"hw_power_watts" in body else -status] += 1

        workers = [threading.Thread(target=scrape) for _ in range(50)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert set(outcomes) == {200} and outcomes[200] >= 50
        end = agent.json("/api/v1/snapshot")
        assert end["cycle"] > start["cycle"] + 5  # sampling was not starved by the scrapes


def _link_sample(taken_at: float, transmitted: float) -> DeviceSample:
    link = Link("nvlink", 0, (Reading(m.LINK_IO, transmitted,
                                      labels_of({"direction": "transmit"})),))
    return DeviceSample(Device("nvidia", "0", "GPU-x", "H200"), True, taken_at, links=(link,))


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ((100.0, 1_000.0), (101.0, 3_000.0), {"transmit": 2_000.0}),
        ((100.0, 5_000.0), (101.0, 10.0), {}),        # counter reset: no rate, never negative
        ((100.0, 1_000.0), (99.0, 3_000.0), {}),      # clock jumped back: no rate
        ((100.0, 1_000.0), (100.0, 3_000.0), {}),     # same instant: no rate
    ],
)
def test_rates_never_go_negative(before, after, expected):
    result = with_link_rates(_link_sample(*before), _link_sample(*after))
    assert dict(result.links[0].rates) == expected


def _read_link(counters_at: float, transmitted: float, rates: dict | None = None) -> Link:
    return Link("roce", 0, (Reading(m.LINK_IO, transmitted, labels_of({"direction": "transmit"})),),
                rates=rates or {}, counters_at=counters_at)


def test_rates_of_counters_read_less_often_than_each_cycle():
    device = Device("intel", "0", "gaudi-x", "HL-225")
    first = DeviceSample(device, True, 100.0, links=(_read_link(99.5, 1_000.0, {"transmit": 7.0}),))
    again = DeviceSample(device, True, 101.0, links=(_read_link(99.5, 1_000.0),))
    later = DeviceSample(device, True, 102.0, links=(_read_link(101.5, 5_000.0),))
    kept = with_link_rates(first, again)
    assert dict(kept.links[0].rates) == {"transmit": 7.0}  # not re-read: last rate kept, not 0
    assert dict(with_link_rates(kept, later).links[0].rates) == {"transmit": 2_000.0}  # over 2 s


@pytest.fixture(scope="module")
def ray_node(tmp_path_factory):
    hardware = SimulatedHardware.start("l4-pcie", state_dir=tmp_path_factory.mktemp("hw"))
    cluster = LocalRayCluster(prefix="rf-")
    try:
        cluster.start_head(hardware.environ(), "--num-cpus=1")
        yield cluster, hardware
    finally:
        cluster.stop()


def _daemon_pid(executable: str, cluster: LocalRayCluster) -> int:
    """The pid of one of the cluster's Ray daemons, by the program it runs."""
    for pid, (cmdline, _, state) in processes().items():
        if (state != "Z" and cmdline and cmdline[0].endswith(executable)
                and any(str(cluster.root) in arg or f":{cluster.gcs_port}" in arg
                        for arg in cmdline)):
            return pid
    raise AssertionError(f"no {executable} of this cluster")


def _attribution_up(agent: AgentProcess) -> dict[str, float]:
    _, _, body = agent.get("/metrics")
    return {s.labels["source"]: s.value for s in _series(body, "ray_accelerator_attribution_up")}


# The head's agent asks its workers for their tasks and, pairing transfers, the State API
# for the cluster's unfinished actor tasks (docs/transfers.md). An idle holder runs no
# task, so no task is looked up by id (`state_api` is reported once one is).
ALL_UP = {"raylet": True, "workers": True, "transfers": True}


def _sources(doc: dict) -> dict[str, bool]:
    return {s["name"]: s["up"] for s in doc["attribution"]["sources"]}


@pytest.mark.ray
def test_raylet_and_gcs_stop_and_come_back(ray_node, tmp_path):
    cluster, hardware = ray_node
    # The pairing agent's State API listing is served through the GCS.
    driver = start_driver(cluster, tmp_path / "job", "idle")
    args = ("--ray-address", cluster.gcs_address, "--interval", "0.3",
            "--attribution-interval", "0.3")
    try:
        with AgentProcess(*args, env=hardware.environ(), ray=True) as agent:
            agent.wait_for(lambda d: _sources(d) == ALL_UP,
                           timeout=60)
            for daemon, source in (("/raylet", "raylet"), ("/gcs_server", "transfers")):
                frozen = _daemon_pid(daemon, cluster)
                os.kill(frozen, signal.SIGSTOP)
                try:
                    agent.wait_for(lambda d, source=source: _sources(d).get(source) is False,
                                   timeout=60)
                    # devices keep flowing, unattributed, while Ray does not answer
                    status, _, body = agent.get("/metrics", timeout=2)
                    assert status == 200
                    assert len(_series(body, "hw_gpu_memory_usage_bytes")) == 4
                    ups = _attribution_up(agent)
                    assert ups[source] == 0
                finally:
                    os.kill(frozen, signal.SIGCONT)
                agent.wait_for(lambda d: _sources(d) == ALL_UP,
                               timeout=90)
    finally:
        driver.stop()
