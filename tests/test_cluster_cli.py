"""Flags of the cluster commands and the agent's registration/OTLP flags: clear refusals.

Every bad flag exits with status 2 and names the problem before anything is
contacted; a cluster that cannot be reached exits with status 1 and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ray._common.network_utils import find_free_port

# Stay on loopback: Ray would otherwise turn 127.0.0.1 into this machine's address.
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith("OTEL_") and k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
ENV["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def ray_accel(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", *args],
                          capture_output=True, text=True, timeout=120, env=env or ENV)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["deploy", "--address", "headnode"], "GCS address as HOST:PORT"),
        (["deploy", "--address", "ray://head:10001"], "GCS address as HOST:PORT"),
        (["deploy", "--address", "head:0"], "GCS address as HOST:PORT"),
        (["deploy", "--host", "node-1"], "expected an IP address"),
        (["deploy", "--port", "70000"], "--port must be between"),
        (["deploy", "--interval", "0"], "--interval must be between"),
        (["deploy", "--watch-interval", "0.1"], "--watch-interval must be between"),
        (["deploy", "--register-interval", "x"], "--register-interval must be a number"),
        (["deploy", "--wait", "-1"], "--wait must be between"),
        (["deploy", "--sd-file", "targets.json"], "expected an absolute path"),
        (["deploy", "--sd-file", "/tmp/t.json", "--no-sd-file"], "not allowed with"),
        (["deploy", "--node-label", "ray_node_id=x"], "already used"),
        (["deploy", "--backend", "bogus"], "unknown backend"),
        (["deploy", "--otlp-endpoint", "collector:4317"], "--otlp-endpoint must be an http"),
        (["deploy", "--otlp-protocol", "http/json"], "invalid choice"),
        (["deploy", "--otlp-interval", "5"], "need an endpoint"),
        (["undeploy", "--address", "10.0.0.1"], "GCS address as HOST:PORT"),
        (["status", "--address", ":6379"], "GCS address as HOST:PORT"),
        (["sd-file", "--output", "/no/such/folder/t.json"], "--output: folder"),
        (["sd-file", "--interval", "0"], "--interval must be between"),
        (["agent", "--register-interval", "0"], "--register-interval must be between"),
        (["agent", "--otlp-endpoint", "grpc://collector:4317"], "--otlp-endpoint must be"),
        (["agent", "--otlp-endpoint", "http://collector:port"], "invalid port"),
    ],
)
def test_bad_flags_are_refused_with_a_clear_message(args, message):
    result = ray_accel(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_bad_otlp_variables_are_refused():
    result = ray_accel("agent", "--no-ray", env={
        **ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert result.returncode == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL must be one of grpc, http/protobuf" in result.stderr


@pytest.mark.parametrize("command", ["deploy", "undeploy", "status", "sd-file"])
def test_an_unreachable_cluster_is_reported(command):
    address = f"127.0.0.1:{find_free_port()}"
    result = ray_accel(command, "--address", address)
    assert result.returncode == 1
    assert f"ray-accel {command}: GCS at {address}" in result.stderr
    assert "unreachable" in result.stderr


def test_no_cluster_on_this_machine_is_reported(tmp_path):
    result = ray_accel("status", env={**ENV, "RAY_TMPDIR": str(tmp_path)})
    assert result.returncode == 1
    assert "ray-accel status: no Ray node runs on this host" in result.stderr
