"""The agent on the simulated TPU v5e-8 host, end to end over real HTTP."""

from __future__ import annotations

from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text


def series(body: bytes, name: str) -> list:
    return [s for family in parse_text(body.decode()) for s in family.samples if s.name == name]


def test_tpu_v5e_8_node_serves_its_chips_under_the_shared_names():
    with AgentProcess("--simulate", "tpu-v5e-8", "--interval", "0.2") as agent:
        snapshot = agent.wait_for(
            lambda d: len([x for x in d["devices"] if x["vendor"] == "google"]) == 8
            and d["cycle"] >= 3)
        _, _, body = agent.get("/metrics")
    chips = [d for d in snapshot["devices"] if d["vendor"] == "google"]
    assert {d["model"] for d in chips} == {"TPU v5 lite"}
    assert {d["facts"]["tpu_slice_name"] for d in chips} == {"tpu-v5e-slice-a"}
    assert {d["facts"]["tpu_topology"] for d in chips} == {"4x4"}
    assert {d["facts"]["tpu_worker_id"] for d in chips} == {"1"}
    up = {s.labels["backend"]: s.value for s in series(body, "ray_accelerator_backend_up")}
    assert up["tpu"] == 1.0
    limit = series(body, "hw_gpu_memory_limit_bytes")
    assert {(s.labels["vendor"], s.value) for s in limit} == {("google", 16 * 2**30)}
    busy = {s.labels["index"]: s.value for s in series(body, "hw_gpu_utilization_ratio")
            if s.labels["vendor"] == "google"}
    assert len(busy) == 8 and busy["7"] == 0 and 0 < busy["0"] <= 1
    for name in ("hw_gpu_memory_usage_bytes", "ray_accelerator_memory_bandwidth_utilization_ratio",
                 "ray_accelerator_tensorcore_utilization_ratio",
                 "ray_accelerator_collective_latency_seconds"):
        assert {s.labels["vendor"] for s in series(body, name)} == {"google"}, name
    latency = series(body, "ray_accelerator_collective_latency_seconds")
    assert {s.labels["quantile"] for s in latency} <= {"0.5", "0.9", "0.99"}
