"""hgx-h200's hung collective end to end, next to a compute-bound GPU with flat links.

The shipped scenario hangs GPUs 0 and 1 in a collective from 240 s to 360 s of their
period (utilization 100 %, SM activity 2 %, NVLink and PCIe counters flat); the test
starts the simulated hardware at 245 s, inside the hang. GPU 2 is changed into a
compute-bound worker that does not communicate: as busy, its SMs and tensor pipes
working, its links as flat as the hung ones. A real agent runs on it and a real
Prometheus scrapes it with the generated alert rules (their `for` shortened): the
suspected-stall and spinning alerts fire on GPUs 0 and 1 and on nothing else; GPU 2
reads flat links and a suspected-stall verdict of 0.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml
from agent_process import AgentProcess
from prometheus_server import PROMETHEUS, PrometheusServer

from ray_accel.exporter import catalog as m
from ray_accel.exporter.simulate import SimulatedHardware, load_scenario
from ray_accel.grafana.alerts import rules_file
from ray_accel.grafana.alerts.config import AlertConfig
from ray_accel.grafana.alerts.rules import groups
from ray_accel.grafana.promql import metric
from ray_accel.grafana.thresholds import Thresholds

JOB = "ray-accel"
INSIDE_THE_HANG_S = 245.0
HUNG, COMPUTE_BOUND = ["0", "1"], "2"
STALL, SPINNING = "RayAcceleratorCollectiveSuspectedStall", "RayAcceleratorDeviceSpinning"


def _compute_bound_with_flat_links(scenario: dict) -> dict:
    """hgx-h200 with GPU 2 busy computing and moving nothing over NVLink or PCIe."""
    changed = copy.deepcopy(scenario)
    device = changed["devices"][int(COMPUTE_BOUND)]
    device["utilization_gpu_percent"] = 97
    fields = device["fields"]
    for number in ("138", "139"):
        fields[number] = {"*": {"start": 5_000_000_000, "rate_per_s": 0}}
    for number in ("197", "198"):
        fields[number]["value"] = {"start": 7_000_000_000, "rate_per_s": 0}
    device["pcie_throughput_kbps"] = {"tx": 0, "rx": 0}
    gpm = device["gpm"]
    gpm.update(graphics_util=97, sm_util=88, any_tensor_util=62, hmma_tensor_util=60,
               pcie_tx_per_sec=0, pcie_rx_per_sec=0)
    gpm["nvlink_tx_per_sec"] = gpm["nvlink_rx_per_sec"] = {"*": 0}
    return changed


def _indices(alerts: list[dict]) -> list[str]:
    return sorted(a["labels"]["index"] for a in alerts)


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus is not installed")
def test_hung_collective_alerts_fire_and_a_compute_bound_gpu_with_flat_links_stays_quiet(
        tmp_path):
    scenario = _compute_bound_with_flat_links(load_scenario("hgx-h200"))
    config = AlertConfig(Thresholds().with_overrides(
        {"collective_stall_for": "2s", "device_spinning_for": "2s"}), JOB)
    rules = rules_file.render(groups(config), rules_file.DEFAULT_RUNBOOK_BASE)
    with SimulatedHardware.start(scenario, state_dir=tmp_path / "hw",
                                 at_s=INSIDE_THE_HANG_S) as hardware, \
            AgentProcess("--interval", "0.5", "--collective-stall-window", "2",
                         env=hardware.environ()) as agent:
        prometheus_config = yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": JOB, "static_configs": [
                {"targets": [agent.url.removeprefix("http://")]}]}],
        })
        with PrometheusServer(prometheus_config, tmp_path / "prom",
                              {"alerts.yml": rules}) as prometheus:
            prometheus.wait_until(lambda: _indices(prometheus.firing(STALL)) == HUNG,
                                  "the suspected-stall alert on GPUs 0 and 1", timeout=90)
            # the agent's spinning verdict needs its 10 s window, then the rule's 2 s
            prometheus.wait_until(lambda: _indices(prometheus.firing(SPINNING)) == HUNG,
                                  "the spinning alert on GPUs 0 and 1", timeout=90)
            time.sleep(3)  # GPU 2 has had as long as the hung GPUs to set anything off
            assert _indices(prometheus.firing(STALL)) == HUNG
            assert _indices(prometheus.firing(SPINNING)) == HUNG
            assert not [a for a in prometheus.alerts()
                        if a["labels"].get("index") == COMPUTE_BOUND
                        and a["labels"]["alertname"] in (STALL, SPINNING)]
            selector = f'{{index="{COMPUTE_BOUND}"}}'
            verdict = prometheus.query(metric(m.COLLECTIVE_SUSPECTED_STALL) + selector)
            assert [float(s["value"][1]) for s in verdict] == [0.0]
            spinning = prometheus.query(metric(m.DEVICE_SPINNING) + selector)
            assert [float(s["value"][1]) for s in spinning] == [0.0]
            nvlink = prometheus.query(f'sum(rate({metric(m.LINK_IO)}'
                                      f'{{index="{COMPUTE_BOUND}",link_type="nvlink"}}[5s]))')
            assert [float(s["value"][1]) for s in nvlink] == [0.0]  # links flat, as the hung
            busy = prometheus.query(f'{metric(m.GPU_UTILIZATION)}'
                                    f'{{index="{COMPUTE_BOUND}",task="general"}}')
            assert [float(s["value"][1]) for s in busy] == [0.97]
