"""What the board and alert tests share: the agents' job, short thresholds, family-only metrics."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

JOB = "ray-accel"
# Shortened so that every alert can fire within the test.
THRESHOLDS = {
    **{name: "2s" for name in (
        "idle_allocation_for", "unallocated_busy_for", "row_remap_pending_for",
        "thermal_throttle_for", "power_throttle_for", "memory_full_for", "pcie_downtrained_for",
        "link_down_for", "device_lost_for", "agent_down_for", "backend_down_for",
        "sample_stale_for", "attribution_stale_for", "fabric_unhealthy_for")},
    "xid_window": "1m", "ecc_window": "1m", "link_error_window": "30s", "link_error_burst": "1",
    "sample_age_seconds": "3",
}

# Metrics only TPU, Neuron or Gaudi devices report: their panels are checked by
# tests/test_grafana_families.py against a node with those devices.
FAMILY_ONLY_METRICS = frozenset(m.spec(name).prometheus_name for name in (
    m.TENSORCORE_UTILIZATION, m.COLLECTIVE_LATENCY, m.TRANSFER_LATENCY,
    m.NEURON_CORE_MEMORY_USAGE, m.NEURON_EXECUTIONS, m.NEURON_EXECUTION_ERRORS,
    m.NEURON_EXECUTION_LATENCY, m.NEURON_RUNTIME_VCPU_UTILIZATION, m.NEURON_RUNTIME_HOST_MEMORY,
    m.GAUDI_PCIE_THROUGHPUT))


# Metrics only AMD GPUs report (ROCm 6.3+): tests/test_amd_grafana.py checks their panels.
AMD_ONLY_METRICS = frozenset(m.spec(name).prometheus_name for name in (
    m.XCP_GFX_UTILIZATION, m.XCP_GFX_BELOW_HOST_LIMIT, m.THROTTLE_RESIDENCY))


def family_only(expr: str) -> bool:
    """Whether a query reads only metrics of the TPU, Neuron and Gaudi families."""
    return any(name in expr for name in FAMILY_ONLY_METRICS)


def amd_only(expr: str) -> bool:
    """Whether a query reads only metrics that AMD GPUs alone report."""
    return any(name in expr for name in AMD_ONLY_METRICS)
