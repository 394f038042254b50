"""`ray-accel topo`: the local matrix, and a multi-node cluster grouped by NVLink domain."""

from __future__ import annotations

import subprocess
import sys
from contextlib import ExitStack

import pytest
from agent_process import AgentProcess
from loopback_ray import LoopbackCluster

from ray_accel.exporter.simulate import SimulatedHardware

CLI = [sys.executable, "-m", "ray_accel.exporter.cli"]


def test_local_matrix_on_simulated_hardware(tmp_path):
    hardware = SimulatedHardware.start("l4-pcie", state_dir=tmp_path)
    result = subprocess.run([*CLI, "topo", "--backend", "nvidia"], capture_output=True,
                            text=True, env={**hardware.environ(), "PATH": "/usr/bin:/bin"},
                            timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[:5]]
    assert rows[0][:4] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert rows[1][:5] == ["GPU0", "X", "PIX", "NODE", "NODE"]


def test_an_empty_scenario_is_refused_not_read_as_this_machine(tmp_path):
    """`--simulate ""` had read the machine's real hardware, as if no scenario was named."""
    hardware = SimulatedHardware.start("l4-pcie", state_dir=tmp_path)  # what a real read finds
    result = subprocess.run([*CLI, "topo", "--simulate", ""], capture_output=True, text=True,
                            env={**hardware.environ(), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.returncode == 2, result.stdout
    assert "--simulate: expected a shipped scenario's name" in result.stderr
    assert "GPU0" not in result.stdout


@pytest.mark.ray
def test_cluster_nodes_grouped_by_nvlink_domain(tmp_path):
    cluster = LoopbackCluster(prefix="tp-")
    boards = {"hgx-a": "hgx-h200", "hgx-b": "hgx-h200", "pcie": "l4-pcie"}
    hardware = {name: SimulatedHardware.start(scenario, state_dir=tmp_path / name)
                for name, scenario in boards.items()}
    try:
        nodes = {"hgx-a": cluster.start_head(hardware["hgx-a"].environ(), "--num-cpus=0")}
        for name in ("hgx-b", "pcie"):
            nodes[name] = cluster.add_node(hardware[name].environ(), "--num-cpus=0")
        with ExitStack() as agents:
            for name, node_id in nodes.items():
                agents.enter_context(AgentProcess(
                    "--ray-address", cluster.gcs_address, "--ray-node-id", node_id,
                    "--register-interval", "1",
                    env={**cluster.env, **hardware[name].environ()}, ray=True))
            result = None
            for _ in range(30):
                result = subprocess.run([*CLI, "topo", "--address", cluster.gcs_address],
                                        capture_output=True, text=True, env=cluster.env,
                                        timeout=60)
                listed = all(n in result.stdout for n in nodes.values())
                if listed and "no devices" not in result.stdout:
                    break
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        domain = next(i for i, line in enumerate(lines) if line.startswith("NVLink domain"))
        assert lines[domain].endswith("2 node(s)")
        assert {lines[domain + 1].split()[0], lines[domain + 2].split()[0]} == {
            nodes["hgx-a"], nodes["hgx-b"]}
        assert "8x NVIDIA H200" in lines[domain + 1]
        alone = lines.index("no NVLink domain: 1 node(s)")
        assert lines[alone + 1].split()[0] == nodes["pcie"]
        assert "4x NVIDIA L4" in lines[alone + 1]
    finally:
        cluster.stop()


@pytest.mark.parametrize("scenario, header", [
    ("mixed", ["nvidia:GPU0", "nvidia:GPU1", "amd:GPU0", "amd:GPU1"]),
    ("tpu-v5e-8", [f"TPU{i}" for i in range(8)]),
    ("trn1-32xl", [f"ND{i}" for i in range(16)]),
])
def test_each_device_has_a_name_of_its_own_in_the_matrix(scenario, header):
    """A node with NVIDIA and AMD GPUs had two columns named GPU0; TPU chips were GPUs."""
    result = subprocess.run([*CLI, "topo", "--simulate", scenario], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()[0].split()[:len(header)]) == sorted(header)
