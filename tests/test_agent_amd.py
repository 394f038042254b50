"""The agent on simulated AMD and mixed nodes, end to end over real HTTP."""

from __future__ import annotations

import shutil
import subprocess

from agent_process import AgentProcess, write_scenario
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter.simulate import load_scenario


def series(body: bytes, name: str) -> list:
    return [s for family in parse_text(body.decode()) for s in family.samples if s.name == name]


# The TPU, Neuron and Gaudi backends are installed too, and down on these nodes.
NO_OTHER_FAMILIES = {"tpu": 0.0, "neuron": 0.0, "gaudi": 0.0}


def by_backend(body: bytes) -> dict[str, float]:
    return {s.labels["backend"]: s.value for s in series(body, "ray_accelerator_backend_up")}


def test_mi300x_node_serves_eight_amd_gpus_under_the_same_names():
    with AgentProcess("--simulate", "mi300x-8", "--interval", "0.2") as agent:
        snapshot = agent.wait_for(
            lambda d: len(d["devices"]) == 8 and d["cycle"] >= 3
            and all(link["rates_bytes_per_s"] for dev in d["devices"] for link in dev["links"]))
        _, _, body = agent.get("/metrics")
        power = series(body, "hw_power_watts")
        assert len(power) == 8
        assert {(s.labels["vendor"], s.labels["model"]) for s in power} == {
            ("amd", "AMD Instinct MI300X")}
        assert all(0 < s.value <= 750 for s in power)
        memory = series(body, "hw_gpu_memory_limit_bytes")
        assert {s.value for s in memory} == {196592 * 2**20}
        for name in ("hw_gpu_utilization_ratio", "hw_energy_joules_total",
                     "hw_temperature_celsius", "ray_accelerator_clock_frequency_hertz",
                     "hw_errors_total", "ray_accelerator_process_memory_usage_bytes"):
            assert {s.labels["vendor"] for s in series(body, name)} == {"amd"}, name
        assert by_backend(body) == {"amd": 1.0, "nvidia": 0.0, **NO_OTHER_FAMILIES}
        # XGMI: a full mesh, 7 links per GPU, each with both directions
        io = series(body, "hw_gpu_io_bytes_total")
        assert {s.labels["link_type"] for s in io} == {"xgmi"}
        assert len(io) == 8 * 7 * 2
        links = series(body, "ray_accelerator_link_info")
        assert {s.labels["remote_type"] for s in links} == {"gpu"}
        topology = series(body, "ray_accelerator_topology_info")
        assert len(topology) == 8 * 7 and {s.labels["connection"] for s in topology} == {"XGMI"}

        device = snapshot["devices"][0]
        assert device["vendor"] == "amd" and device["facts"]["architecture"] == "gfx942"
        assert [link["link_type"] for link in device["links"]] == ["xgmi"] * 7
        assert device["links"][0]["facts"]["peer_uuid"] == snapshot["devices"][1]["uuid"]
        assert device["values"]["hw.gpu.memory.limit"][0]["value"] == 196592 * 2**20
        health = agent.json("/healthz")
        assert health["status"] == "ok"
        assert health["backends"]["amd"] == {"up": True, "absent": False, "devices": 8,
                                            "message": ""}


def test_mixed_node_shows_both_vendors():
    with AgentProcess("--simulate", "mixed", "--interval", "0.2") as agent:
        snapshot = agent.wait_for(lambda d: len(d["devices"]) == 4)
        l4s = {d["uuid"] for d in snapshot["devices"] if d["vendor"] == "nvidia"}
        # the L4s (PCIe 4.0 x16, no GPM) could wrap their 32-bit PCIe byte counters more than
        # once between two reads even 0.2 s apart: from their second read on they are left
        # out, and /healthz says so
        agent.wait_for(lambda h: set(h["unsupported"].get("pcie_io", ())) == l4s,
                       path="/healthz")
        _, _, body = agent.get("/metrics")
        assert by_backend(body) == {"amd": 1.0, "nvidia": 1.0, **NO_OTHER_FAMILIES}
        promtool = shutil.which("promtool")
        assert promtool, "promtool missing: run `make system-deps`"
        checked = subprocess.run([promtool, "check", "metrics"], input=body,
                                 capture_output=True, timeout=60)
        assert checked.returncode == 0 and not checked.stdout.strip(), checked
        models = {(s.labels["vendor"], s.labels["model"])
                  for s in series(body, "ray_accelerator_device_up")}
        assert models == {("nvidia", "NVIDIA L4"), ("amd", "AMD Instinct MI210")}
        utilization = {(s.labels["vendor"], s.labels["task"])
                       for s in series(body, "hw_gpu_utilization_ratio")}
        assert {("nvidia", "general"), ("amd", "general"), ("amd", "multimedia")} <= utilization
        assert {s.labels["link_type"] for s in series(body, "hw_gpu_io_bytes_total")} == {
            "xgmi"}


def test_broken_amdsmi_leaves_the_other_vendors_serving(tmp_path):
    doc = load_scenario("mixed")
    doc["amdsmi_import_error"] = "KeyError"
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2") as agent:
        snapshot = agent.wait_for(lambda d: len(d["devices"]) == 2 and d["cycle"] >= 2)
        assert {d["vendor"] for d in snapshot["devices"]} == {"nvidia"}
        _, _, body = agent.get("/metrics")
        assert by_backend(body) == {"amd": 0.0, "nvidia": 1.0, **NO_OTHER_FAMILIES}
        assert len(series(body, "hw_power_watts")) == 2
        health = agent.json("/healthz")
        # the node has AMD GPUs that cannot be read: serving goes on, degraded, saying why
        assert health["status"] == "degraded"
        assert "libamd_smi.so" in health["backends"]["amd"]["message"]
        assert [(p["backend"], p["state"]) for p in health["not_answering"]] == [("amd", "down")]
    output = "".join(agent.output) + agent.proc.stdout.read()
    # one warning, and the start report naming it down
    report = [line for line in output.splitlines() if "backends: " in line]
    assert len(report) == 1 and "down: amd" in report[0], output
    amd_lines = [line for line in output.splitlines()
                 if "amd" in line.lower() and line not in report]
    assert len(amd_lines) == 1, output
    assert "WARNING" in amd_lines[0] and "backend amd down" in amd_lines[0]
    assert "Traceback" not in output


def test_lost_amd_gpu_is_down_while_others_report(tmp_path):
    doc = load_scenario("mi300x-8")
    doc["devices"][5]["lost_at_s"] = 1.0
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.2") as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 8 and not d["devices"][5]["up"])
        _, _, body = agent.get("/metrics")
        up = {s.labels["index"]: s.value for s in series(body, "ray_accelerator_device_up")}
        assert up == {str(i): (0.0 if i == 5 else 1.0) for i in range(8)}
        assert "5" not in {s.labels["index"] for s in series(body, "hw_power_watts")}
        errors = series(body, "ray_accelerator_agent_errors_total")
        assert any(s.labels["backend"] == "amd" and s.labels["kind"] == "not_found"
                   for s in errors)
