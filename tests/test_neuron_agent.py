"""The agent on a simulated trn1.32xlarge, end to end over real HTTP."""

from __future__ import annotations

from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text


def series(body: bytes, name: str) -> list:
    return [s for family in parse_text(body.decode()) for s in family.samples if s.name == name]


def test_trn1_node_serves_chips_and_neuroncores_under_the_shared_names():
    with AgentProcess("--simulate", "trn1-32xl", "--interval", "0.5") as agent:
        snapshot = agent.wait_for(
            lambda d: len(d["devices"]) == 48 and all(dev["up"] for dev in d["devices"])
            and any(p["values"].get("ray.accelerator.neuron.execution.latency")
                    for dev in d["devices"] for p in dev["processes"]), timeout=60)
        _, _, body = agent.get("/metrics")
        up = {s.labels["backend"]: s.value for s in series(body, "ray_accelerator_backend_up")}
        assert up["neuron"] == 1.0
        utilization = series(body, "hw_gpu_utilization_ratio")
        assert {s.labels["vendor"] for s in utilization} == {"aws"}
        assert len(utilization) == 16 + 32
        assert {s.labels["model"] for s in utilization} == {"Trainium",
                                                            "Trainium NeuronCore-v2"}
        limits = series(body, "hw_gpu_memory_limit_bytes")
        assert len(limits) == 16 and {s.value for s in limits} == {32 * 2**30}
        errors = series(body, "hw_errors_total")
        assert {s.labels["error_type"] for s in errors} == {
            "ecc_corrected", "ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"}
        process_memory = series(body, "ray_accelerator_process_memory_usage_bytes")
        assert {s.labels["pid"] for s in process_memory} == {"41001", "41002", "41003", "41004"}
        for name in ("ray_accelerator_neuron_core_memory_usage_bytes",
                     "ray_accelerator_neuron_executions_total",
                     "ray_accelerator_neuron_execution_errors_total",
                     "ray_accelerator_neuron_execution_latency_seconds",
                     "ray_accelerator_neuron_runtime_vcpu_utilization_ratio",
                     "ray_accelerator_neuron_runtime_host_memory_usage_bytes"):
            assert series(body, name), name
        info = {s.labels["uuid"]: s.labels for s in series(body, "ray_accelerator_device_info")}
        core = next(d for d in snapshot["devices"] if d["index"] == "12/1")
        assert core["facts"]["neuroncore"] == "25"
        assert info[core["uuid"]]["parent_uuid"] == next(
            d["uuid"] for d in snapshot["devices"] if d["index"] == "12")
        assert [p["pid"] for p in core["processes"]] == [41003]
        health = agent.json("/healthz")
        assert health["backends"]["neuron"] == {"up": True, "absent": False, "devices": 48,
                                                  "message": ""}
