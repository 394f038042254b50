"""A GPU that is lost or hangs keeps its counters in /metrics (docs/reliability.md).

Real agent processes on the fake NVML: GPU 2 counts 200 XID 79 events and
uncorrectable ECC errors, then falls off the bus (or its calls hang) in the
same moment. Its XID, ECC and energy counters must stay exported at their last
values with `device_up` 0, and a real Prometheus that scrapes only before and
after the loss must fire the XID alert for it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_process import AgentProcess
from nvml_scenarios import scenario
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_server import PROMETHEUS, PrometheusServer, wait_until

from ray_accel.exporter import catalog as m
from ray_accel.exporter.carry import carried
from ray_accel.exporter.model import Device, DeviceSample, NodeSnapshot, Reading
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.sinks.json import snapshot_document
from ray_accel.exporter.sinks.otlp import snapshot_metrics
from ray_accel.exporter.sinks.prometheus import snapshot_text

LOST = 2
EVENTS = 200
INTERVAL = "0.3"
ROOT = Path(__file__).resolve().parent.parent


def _series(body: bytes, name: str, **labels: str) -> dict[str, float]:
    """index -> value of the samples named `name` having `labels`."""
    return {s.labels["index"]: s.value for f in parse_text(body.decode()) for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())}


def _counters(body: bytes) -> dict[str, dict[str, float]]:
    return {
        "xid": _series(body, "ray_accelerator_xid_errors_total", xid="79"),
        "ecc": _series(body, "hw_errors_total", error_type="ecc_uncorrected"),
        "energy": _series(body, "hw_energy_joules_total"),
    }


def _storm_then(fault: str, hardware: SimulatedHardware) -> None:
    """From now: 200 XID 79 events on GPU 2 within 0.1 s, then `fault` at the last one."""
    at = hardware.elapsed_s() + 0.3
    end = at + 0.1

    def change(doc: dict[str, Any]) -> None:
        gpu = doc["devices"][LOST]
        gpu["xid_events"] = [{"at_s": at + i * 0.1 / EVENTS, "xid": 79} for i in range(EVENTS)]
        if fault == "lost":
            gpu["lost_at_s"] = end
        else:  # every call on it hangs from then on
            doc["delays"] = [{"function": "*", "device": LOST, "seconds": 600, "from_s": end}]

    hardware.modify(change)


@pytest.fixture
def node(tmp_path):
    doc = scenario(devices=4, freeze_at_s=None)
    with SimulatedHardware.start(doc, state_dir=tmp_path / "hw") as hardware:
        yield hardware


@pytest.mark.parametrize("fault", ["lost", "hung"])
def test_a_gpu_lost_or_hung_keeps_its_counters(node, fault):
    with AgentProcess("--interval", INTERVAL, env=node.environ()) as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 4 and all(x["up"] for x in d["devices"]))
        _, _, body = agent.get("/metrics")
        before = _counters(body)
        assert str(LOST) not in before["xid"]  # no XID yet
        _storm_then(fault, node)
        agent.wait_for(lambda d: not d["devices"][LOST]["up"]
                       and (fault == "lost" or d["devices"][LOST]["stale"]), timeout=30)
        # the events delivered around the loss all reach the down GPU's counter
        doc = agent.wait_for(lambda d: sum(
            v["value"] for v in d["devices"][LOST]["values"].get("ray.accelerator.xid.errors", [])
        ) == EVENTS, timeout=30)
        _, _, body = agent.get("/metrics")
        after = _counters(body)
        assert after["xid"][str(LOST)] == EVENTS
        assert after["ecc"][str(LOST)] == before["ecc"][str(LOST)] == 1
        assert after["energy"][str(LOST)] >= before["energy"][str(LOST)] > 0
        assert _series(body, "ray_accelerator_device_up")[str(LOST)] == 0.0
        # its gauges are gone: they are not true any more
        assert str(LOST) not in _series(body, "hw_power_watts")
        assert str(LOST) not in _series(body, "hw_gpu_memory_usage_bytes")
        # the others are untouched
        assert set(_series(body, "hw_power_watts")) == {"0", "1", "3"}
        age = _series(body, "ray_accelerator_device_sample_age_seconds")[str(LOST)]
        time.sleep(1.0)
        _, _, later = agent.get("/metrics")
        assert _counters(later)["xid"][str(LOST)] == EVENTS
        assert _series(later, "ray_accelerator_device_sample_age_seconds")[str(LOST)] > age
        health = agent.json("/healthz")
        assert health["status"] == "degraded"
        (problem,) = health["not_answering"]
        assert problem["uuid"] == doc["devices"][LOST]["uuid"]
        assert problem["state"] == ("down" if fault == "lost" else "stale")
        assert ("gpu_is_lost" if fault == "lost" else "stale") in problem["reason"]
        # its kept counters age past the stale line; a GPU that answers "lost" is down, not
        # stale (not answering), as /healthz says
        aged = agent.wait_for(lambda d: d["devices"][LOST]["age_s"] > 2.5, timeout=30)
        assert aged["devices"][LOST]["stale"] is (fault == "hung")


def test_an_xid_is_counted_while_every_gpu_hangs(node):
    """A GSP timeout leaves every GPU's calls hanging, with the XID that says why: reads ask
    the event set no more, and the watcher's own thread asks it."""
    with AgentProcess("--interval", INTERVAL, env=node.environ()) as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 4 and all(x["up"] for x in d["devices"]))
        at = node.elapsed_s() + 0.5

        def hang_then_xid(doc: dict[str, Any]) -> None:
            doc["delays"] = [{"function": "*", "device": i, "seconds": 600, "from_s": at}
                             for i in range(4)]
            doc["devices"][LOST]["xid_events"] = [{"at_s": at + 1.0, "xid": 119}]

        node.modify(hang_then_xid)
        doc = agent.wait_for(lambda d: all(x["stale"] for x in d["devices"]) and any(
            v["labels"] == {"xid": "119"}
            for v in d["devices"][LOST]["values"].get("ray.accelerator.xid.errors", [])),
            timeout=30)
        (counted,) = doc["devices"][LOST]["values"]["ray.accelerator.xid.errors"]
        assert counted["value"] == 1
        _, _, body = agent.get("/metrics")
        assert _series(body, "ray_accelerator_xid_errors_total", xid="119") == {str(LOST): 1.0}


def _generated_rules(folder: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "grafana",
                             "--out", str(folder), "--agent-job", "ray-accel"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return (folder / "prometheus" / "ray-accel-alerts.yml").read_text()


SCRAPE_S = 15  # as a Prometheus commonly scrapes: XIDs and loss both fall between two scrapes


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus is not installed")
def test_prometheus_fires_the_xid_alert_for_a_gpu_lost_between_scrapes(node, tmp_path):
    with AgentProcess("--interval", INTERVAL, env=node.environ()) as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 4 and all(x["up"] for x in d["devices"]))
        config = yaml.safe_dump({
            "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": "2s",
                       "evaluation_interval": "1s"},
            "rule_files": ["ray-accel-alerts.yml"],
            "scrape_configs": [{"job_name": "ray-accel", "honor_labels": True,
                                "static_configs": [
                                    {"targets": [agent.url.removeprefix("http://")]}]}],
        })
        rules = _generated_rules(tmp_path / "generated")
        with PrometheusServer(config, tmp_path / "prometheus",
                              {"ray-accel-alerts.yml": rules}) as prometheus:

            def last_scrape() -> str:
                (target,) = prometheus.targets("ray-accel")
                return target["lastScrape"] if target["health"] == "up" else ""

            scraped = wait_until(last_scrape, "a first scrape of the agent")
            up = prometheus.query(f'ray_accelerator_device_up{{index="{LOST}"}}')
            assert up and up[0]["value"][1] == "1"
            # Right after the next scrape: the storm and the loss fall before the one after.
            wait_until(lambda: last_scrape() not in ("", scraped), "a second scrape",
                       timeout=3 * SCRAPE_S, every=0.1)
            _storm_then("lost", node)
            alerts = prometheus.wait_until(
                lambda: [a for a in prometheus.firing("RayAcceleratorXidError")
                         if a["labels"]["index"] == str(LOST)],
                "the XID alert firing for the lost GPU", timeout=4 * SCRAPE_S)
            assert alerts[0]["labels"]["xid"] == "79"
            # Prometheus saw the XID series only with the GPU already down
            seen = prometheus.query(
                f'ray_accelerator_xid_errors_total{{index="{LOST}"}} '
                f'and on(uuid) ray_accelerator_device_up == 0')
            assert seen and float(seen[0]["value"][1]) == EVENTS
            never_up = prometheus.query(
                f'count_over_time((ray_accelerator_xid_errors_total{{index="{LOST}"}} '
                f'and on(uuid) ray_accelerator_device_up == 1)[5m:1s])')
            assert never_up == []


def test_every_sink_exports_a_down_devices_counters_and_not_its_gauges():
    gpu = Device("nvidia", "2", "GPU-2", "H200")
    last = DeviceSample(gpu, True, 100.0, readings=(
        Reading(m.POWER, 350.0), Reading(m.ENERGY, 9000.0),
        Reading(m.HW_ERRORS, 1.0, (("error_type", "ecc_uncorrected"),))))
    lost = carried(last, DeviceSample(gpu, False, 101.0, errors={"fn": "gpu_is_lost"}),
                   (Reading(m.XID_ERRORS, 200.0, (("xid", "79"),)),))
    snapshot = NodeSnapshot(cycle=3, taken_at=105.0, interval_s=1.0, node_labels={},
                            backends=(), devices=(lost,))
    expected = {m.ENERGY: 9000.0, m.HW_ERRORS: 1.0, m.XID_ERRORS: 200.0}
    text = snapshot_text(snapshot)
    prometheus = {name: _series(text, m.spec(name).prometheus_name).get("2")
                  for name in (*expected, m.POWER)}
    assert prometheus == {**expected, m.POWER: None}
    assert _series(text, "ray_accelerator_device_sample_age_seconds") == {"2": 5.0}
    otlp = {metric.name: [p.value for p in metric.data.data_points]
            for metric in snapshot_metrics(snapshot, 0)}
    assert {name: otlp.get(name) for name in (*expected, m.POWER)} == {
        **{name: [value] for name, value in expected.items()}, m.POWER: None}
    (device,) = snapshot_document(snapshot)["devices"]
    assert not device["up"] and set(device["values"]) == set(expected)
