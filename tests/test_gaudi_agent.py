"""The agent on the simulated HLS-Gaudi2 node, end to end over real HTTP."""

from __future__ import annotations

from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text


def series(body: bytes, name: str) -> list:
    return [s for family in parse_text(body.decode()) for s in family.samples if s.name == name]


def test_gaudi2_node_serves_eight_gaudis_under_the_shared_names():
    with AgentProcess("--simulate", "gaudi2-8", "--interval", "0.2") as agent:
        snapshot = agent.wait_for(
            lambda d: len(d["devices"]) == 8 and d["cycle"] >= 3
            and all(link["rates_bytes_per_s"] for dev in d["devices"] for link in dev["links"]))
        _, _, body = agent.get("/metrics")
        power = series(body, "hw_power_watts")
        assert {(s.labels["vendor"], s.labels["model"]) for s in power} == {("intel", "HL-225")}
        assert len(power) == 8 and all(0 < s.value <= 600 for s in power)
        assert {s.value for s in series(body, "hw_gpu_memory_limit_bytes")} == {96 * 2**30}
        for name in ("hw_gpu_utilization_ratio", "hw_energy_joules_total",
                     "hw_temperature_celsius", "ray_accelerator_clock_frequency_hertz",
                     "hw_errors_total", "ray_accelerator_pcie_link_generation"):
            assert {s.labels["vendor"] for s in series(body, name)} == {"intel"}, name
        up = {s.labels["backend"]: s.value for s in series(body, "ray_accelerator_backend_up")}
        assert up["gaudi"] == 1.0 and up["nvidia"] == 0.0  # no NVIDIA driver here
        # 24 RoCE ports per card, both directions; 21 reach the other cards
        io = series(body, "hw_gpu_io_bytes_total")
        assert {s.labels["link_type"] for s in io} == {"roce"} and len(io) == 8 * 24 * 2
        remote = [s.labels["remote_type"] for s in series(body, "ray_accelerator_link_info")]
        assert remote.count("gpu") == 8 * 21 and remote.count("network") == 8 * 3
        assert len(series(body, "ray_accelerator_link_up")) == 8 * 24

        device = snapshot["devices"][0]
        assert device["vendor"] == "intel" and device["facts"]["module_id"] == "2"
        assert device["values"]["hw.gpu.memory.limit"][0]["value"] == 96 * 2**30
        assert agent.json("/healthz")["backends"]["gaudi"] == {
            "up": True, "absent": False, "devices": 8, "message": ""}
