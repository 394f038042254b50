"""The demo without a usable Prometheus: one clear line, no traceback, the rest serves.

The demo's start-up step for Prometheus (demo/run.py) with the server missing,
with one that exits at once, and the endpoints it then prints; and a --ready-file the
demo could not write, refused before anything starts.
"""

from __future__ import annotations

import subprocess
import sys

from ray_accel.demo import run as demo_run
from ray_accel.demo.endpoints import DemoEndpoints
from ray_accel.demo.prometheus import MISSING, DemoPrometheus


def test_a_missing_prometheus_is_one_line_and_no_server(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(demo_run, "find_binary", lambda: None)
    assert demo_run._start_prometheus(tmp_path / "prometheus", tmp_path, 9090) is None
    assert capsys.readouterr().out.splitlines() == [MISSING]
    assert not (tmp_path / "prometheus").exists()


def test_a_prometheus_that_exits_at_once_is_reported_not_raised(tmp_path):
    prometheus = DemoPrometheus("/bin/false", tmp_path / "prometheus", tmp_path)
    prometheus.start()
    reason = prometheus.wait_ready(timeout_s=30)
    prometheus.stop()
    assert reason is not None and reason.startswith("Prometheus exited"), reason
    # what it was given: both discovery files of the session, and the alert rules
    config = (tmp_path / "prometheus" / "prometheus.yml").read_text()
    assert str(tmp_path / "prom_metrics_service_discovery.json") in config
    assert str(tmp_path / "ray_accel_service_discovery.json") in config
    rules = (tmp_path / "prometheus" / "ray-accel-alerts.yml").read_text()
    assert "alert: RayAcceleratorAllocatedIdle\n    expr: ray_accelerator_allocation_idle == 1\n" \
           "    for: 30s\n" in rules


def test_without_prometheus_the_endpoints_leave_out_its_alerts_page():
    endpoints = DemoEndpoints(dashboard_url="http://127.0.0.1:1", token_file="/t/token",
                              agent_url="http://127.0.0.1:2", prometheus_url=None)
    text = endpoints.text()
    assert "Prometheus" not in text
    assert text.splitlines()[0] == "Accelerators tab:  http://127.0.0.1:1/accelerators/"
    assert "Metrics:  http://127.0.0.1:2/metrics" in text


def test_a_ready_file_in_a_missing_folder_is_refused_before_anything_starts(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "demo",
                             "--ready-file", str(tmp_path / "no-such-folder" / "ready.json")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--ready-file: folder" in result.stderr and "does not exist" in result.stderr
    assert result.stdout == ""
