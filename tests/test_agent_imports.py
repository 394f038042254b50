"""A running agent holds only the modules its job needs (resident memory, docs/benchmarks.md §3).

Each test starts `ray-accel agent` in a subprocess of its own on the simulated
8x H200 node, waits until it has sampled a few cycles (and, with Ray, tried the
GCS), then lists the modules that process imported.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from ray_accel.exporter.simulate import SimulatedHardware

# Runs the agent in this interpreter, and lists sys.modules once it has sampled.
_RUN_AND_LIST = r"""
import json, os, signal, socket, sys, threading, time, urllib.request

out, port, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def list_when_sampled():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                if json.load(r)["cycle"] >= 3:
                    break
        except OSError:
            pass
        time.sleep(0.2)
    time.sleep(1.0)  # an attribution round, a registration attempt
    with open(out, "w") as listing:
        json.dump(sorted(sys.modules), listing)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=list_when_sampled, daemon=True).start()
from ray_accel.exporter.cli import main
sys.exit(main(["agent", "--host", "127.0.0.1", "--port", str(port), "--interval", "0.2",
               *args]))
"""

#: Never needed by an NVIDIA node's agent: other vendors, other subcommands, Ray itself,
#: an HTTP framework (the agent serves through exporter/httpd/).
NOT_FOR_AN_NVIDIA_AGENT = (
    "ray", "amdsmi", "opentelemetry", "yaml", "bcrypt", "grafanalib",
    "aiohttp", "yarl", "multidict", "ray_accel.exporter.aiohttp_serving",
    "ray_accel.dashboard_module", "ray_accel.grafana", "ray_accel.demo",
    "ray_accel.exporter.backends.amd", "ray_accel.exporter.backends.tpu",
    "ray_accel.exporter.backends.neuron", "ray_accel.exporter.backends.gaudi",
    "ray_accel.exporter.simulate", "ray_accel.exporter.record.scenario_file",
    "ray_accel.exporter.sinks.otlp",
)


@pytest.fixture(scope="module")
def hardware(tmp_path_factory) -> SimulatedHardware:
    return SimulatedHardware.start("hgx-h200", state_dir=tmp_path_factory.mktemp("hw"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def agent_modules(hardware: SimulatedHardware, tmp_path, *args: str) -> set[str]:
    listing = tmp_path / "modules.json"
    env = {**hardware.environ(), "RAY_ADDRESS": "", "PYTHONWARNINGS": "ignore"}
    finished = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, str(listing), str(_free_port()), *args],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=180)
    assert listing.exists(), finished.stdout + finished.stderr
    return set(json.loads(listing.read_text()))


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_standalone_nvidia_agent_imports_no_other_vendor_subcommand_or_grpc(hardware, tmp_path):
    modules = agent_modules(hardware, tmp_path, "--no-ray", "--backend", "nvidia")
    assert "ray_accel.exporter.backends.nvidia.backend" in modules  # it did sample
    assert loaded(modules, (*NOT_FOR_AN_NVIDIA_AGENT, "grpc", "google.protobuf",
                            "ray_accel.exporter.attribution.ray_sources")) == []


def test_attributing_agent_talks_grpc_to_the_gcs_without_importing_ray(hardware, tmp_path):
    # A GCS address where nothing listens: discovery asks it over gRPC with Ray's
    # generated messages, fails, and retries; neither Ray's package nor grpcio is imported
    # (the agent's own client speaks the protocol).
    modules = agent_modules(hardware, tmp_path, "--backend", "nvidia",
                            "--ray-address", f"127.0.0.1:{_free_port()}")
    assert "ray_accel.exporter.attribution.ray_sources" in modules
    assert "ray_accel.exporter.attribution.grpc_unary" in modules and "h2" in modules
    assert any(m.endswith(".gcs_service_pb2") for m in modules)
    assert loaded(modules, (*NOT_FOR_AN_NVIDIA_AGENT, "grpc")) == []
