"""The agent end to end: the CLI on simulated hardware, over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from agent_process import AgentProcess, write_scenario
from metrics_text import by_index, series
from nvml_scenarios import scenario
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

from ray_accel.exporter.cluster.cli import status_table
from ray_accel.exporter.cluster.deploy import AgentStatus, probe_health


def test_demo_scenario_serves_eight_simulated_h200s():
    with AgentProcess("--simulate", "hgx-h200", "--interval", "0.5") as agent:
        agent.wait_for(lambda doc: len(doc["devices"]) == 8
                       and all(d["up"] for d in doc["devices"]))
        status, headers, body = agent.get("/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        power = series(body, "hw_power_watts")
        assert len(power) == 8
        assert {s.labels["model"] for s in power} == {"NVIDIA H200"}
        assert all(s.labels["simulated"] == "true" for s in power)
        assert all(0 < s.value <= 700 for s in power)
        assert set(by_index(series(body, "ray_accelerator_device_up")).values()) == {1.0}
        info = series(body, "ray_accelerator_agent_info")
        assert info[0].labels["scenario"] == "hgx-h200"

        status, headers, body = agent.get("/metrics", accept="application/openmetrics-text")
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert any(f.name == "hw_energy_joules" for f in parse_om(body.decode()))

        health = agent.json("/healthz")
        assert health["status"] == "ok"
        assert health["backends"]["nvidia"] == {"up": True, "absent": False, "devices": 8,
                                               "message": ""}

        snapshot = agent.json("/api/v1/snapshot")
        assert snapshot["node"] == {"simulated": "true"}
        device = snapshot["devices"][0]
        assert device["model"] == "NVIDIA H200" and device["up"] and not device["stale"]
        assert device["values"]["hw.gpu.memory.limit"][0]["value"] == 150754820096


def test_unknown_paths_and_methods_get_json_errors():
    with AgentProcess("--simulate", "l4-pcie") as agent:
        status, _, body = agent.get("/nope")
        assert status == 404 and json.loads(body)["status"] == 404
        status, _, body = agent.get("/metrics", method="POST")
        assert status == 405 and "error" in json.loads(body)


def test_hung_nvml_call_does_not_delay_metrics(tmp_path):
    doc = scenario(devices=3, freeze_at_s=None)
    doc["delays"] = [{"function": "nvmlDeviceGetPowerUsage", "device": 2, "seconds": 120,
                      "from_s": 1.0}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2") as agent:
        agent.wait_for(lambda d: [x["up"] for x in d["devices"]] == [True, True, False])
        assert agent.json("/api/v1/snapshot")["devices"][2]["stale"]
        for _ in range(10):
            status, _, body = agent.get("/metrics", timeout=2.0)
            assert status == 200
        up = by_index(series(body, "ray_accelerator_device_up"))
        assert up == {"0": 1.0, "1": 1.0, "2": 0.0}
        age = by_index(series(body, "ray_accelerator_device_sample_age_seconds"))
        assert age["2"] > age["0"]
        assert set(by_index(series(body, "hw_power_watts"))) == {"0", "1"}
        health = agent.json("/healthz")  # serving goes on; the hung device is named
        assert health["status"] == "degraded"
        assert [(p["index"], p["state"]) for p in health["not_answering"]] == [("2", "stale")]
        # `ray-accel status` shows the same, a line for each device not answering
        status, problems = probe_health(agent.url)
        assert status == "degraded" and len(problems) == 1, problems
        assert problems[0].startswith("nvidia 2 stale: "), problems
        table = status_table([AgentStatus("node", "127.0.0.1", agent.url, status,
                                          not_answering=problems)])
        assert table.splitlines()[0].endswith("NOT ANSWERING")
        assert table.splitlines()[1].endswith(problems[0])


def test_lost_gpu_is_down_while_others_report(tmp_path):
    doc = scenario(devices=4, freeze_at_s=None)
    doc["devices"][2]["lost_at_s"] = 1.0
    doc["devices"][2]["xid_events"] = [{"at_s": 1.0, "xid": 79}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2") as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 4 and not d["devices"][2]["up"])
        _, _, body = agent.get("/metrics")
        assert by_index(series(body, "ray_accelerator_device_up")) == {
            "0": 1.0, "1": 1.0, "2": 0.0, "3": 1.0}
        assert set(by_index(series(body, "hw_gpu_memory_usage_bytes"))) == {"0", "1", "3"}
        errors = series(body, "ray_accelerator_agent_errors_total")
        assert any(s.labels["kind"] == "gpu_is_lost" for s in errors)


def test_driver_missing_at_start_then_appearing(tmp_path):
    doc = scenario(devices=2, freeze_at_s=None)
    doc["errors"] = [{"function": "nvmlInitWithFlags", "device": None,
                      "code": "DRIVER_NOT_LOADED", "until_s": 1.5}]
    args = ("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2", "--retry", "0.5",
            "--backend", "nvidia")  # backends[0] below: the AMD backend is left out
    with AgentProcess(*args) as agent:
        first = agent.wait_for(lambda d: d["cycle"] >= 1)
        if not first["backends"][0]["up"]:
            assert first["backends"][0]["message"]
            _, _, body = agent.get("/metrics")
            assert series(body, "ray_accelerator_backend_up")[0].value == 0
        agent.wait_for(lambda d: d["backends"][0]["up"] and len(d["devices"]) == 2)
        _, _, body = agent.get("/metrics")
        assert series(body, "ray_accelerator_backend_up")[0].value == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0"], "--interval must be between"),
        (["--interval", "soon"], "--interval must be a number"),
        (["--port", "70000"], "--port must be between"),
        (["--simulate", "no-such-scenario"], "--simulate"),
        (["--simulate", ""], "--simulate: expected a shipped scenario's name or a JSON file"),
        (["--simulate", " "], "got an empty one"),
        (["--node-label", "uuid=x"], "already used"),
        (["--node-label", "no-equals"], "NAME=VALUE"),
        (["--node-label", "caf\u00e9=1"], "NAME=VALUE with NAME a label name"),
        (["--node-label", "__name__=x"], "not starting with a digit or __"),
        (["--node-label", "9lives=x"], "NAME=VALUE with NAME a label name"),
        (["--node-label", "team=a", "--node-label", "team=b"], "team given more than once"),
        (["--collective-busy-utilization", "nan"], "must be a ratio in (0, 1]"),
        (["--backend", "bogus"], "unknown backend"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_message(args, message):
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "agent", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def test_demo_refuses_a_node_without_devices_for_its_workload(tmp_path):
    scenario = write_scenario(tmp_path, {"name": "no-devices", "devices": []})
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "demo",
                             "--scenario", scenario], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ray-accel agent --simulate no-devices" in result.stderr


def test_port_in_use_is_reported(tmp_path):
    with AgentProcess("--simulate", "l4-pcie") as first:
        port = first.url.rsplit(":", 1)[1]
        result = subprocess.run(
            [sys.executable, "-m", "ray_accel.exporter.cli", "agent", "--simulate", "l4-pcie",
             "--port", port], capture_output=True, text=True, timeout=60)
        assert result.returncode == 1
        assert "cannot listen" in result.stderr
