"""The shipped Prometheus example: valid for promtool, and reading our discovery file."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ray_accel.exporter.cluster.registry import AgentRecord
from ray_accel.exporter.cluster.sd_file import FILE_NAME, JOB, write_sd_file

EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "prometheus.yml"
PROMTOOL = shutil.which("promtool")
TOKEN_FILE = "/etc/prometheus/ray_auth_token"
GENERATED = Path(__file__).resolve().parent.parent / "grafana" / "generated" / "prometheus"
RULE_FILES = ("ray-accel-alerts.yml", "ray-accel-recording.yml")


def test_example_scrapes_rays_targets_and_ours():
    config = yaml.safe_load(EXAMPLE.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"ray", JOB}
    (ray_files,) = [sd["files"] for sd in jobs["ray"]["file_sd_configs"]]
    assert ray_files == ["/tmp/ray/prom_metrics_service_discovery.json"]
    (ours,) = [sd["files"] for sd in jobs[JOB]["file_sd_configs"]]
    assert ours == [f"/tmp/ray/session_latest/{FILE_NAME}"]
    assert jobs[JOB]["honor_labels"] is True
    assert jobs[JOB]["authorization"] == {"type": "Bearer",
                                          "credentials_file": TOKEN_FILE}
    assert config["rule_files"] == list(RULE_FILES)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (tools/system-deps.sh)")
def test_promtool_accepts_the_example_and_our_discovery_file(tmp_path):
    record = AgentRecord(node_id="ab" * 28, node_ip="127.0.0.1", url="http://127.0.0.1:9478",
                         pid=1, hostname="h", started_at=time.time(), heartbeat_at=time.time(),
                         heartbeat_s=10, simulated=False, deployed=True)
    write_sd_file(tmp_path / FILE_NAME, [record])
    (tmp_path / "prom_metrics_service_discovery.json").write_text(
        '[{"labels": {"job": "ray"}, "targets": ["127.0.0.1:8080"]}]')
    (tmp_path / "token").write_text("the-cluster-token")
    text = EXAMPLE.read_text().replace("/tmp/ray/session_latest", str(tmp_path)).replace(
        TOKEN_FILE, str(tmp_path / "token"))
    config = tmp_path / "prometheus.yml"
    config.write_text(text.replace("/tmp/ray", str(tmp_path)))
    for rules in RULE_FILES:
        shutil.copy(GENERATED / rules, tmp_path / rules)
    result = subprocess.run([PROMTOOL, "check", "config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr  # both discovery files found and valid
    for rules in RULE_FILES:  # the generated rules, beside the config, are loaded and valid
        assert f"Checking {tmp_path / rules}\n  SUCCESS: " in result.stdout, result.stdout

    (tmp_path / FILE_NAME).write_text('[{"targets": "not-a-list"}]')
    broken = subprocess.run([PROMTOOL, "check", "config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0  # promtool does read the discovery file
