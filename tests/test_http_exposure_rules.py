"""Which credentials an agent requires where, and the Prometheus side that matches them."""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import time

import bcrypt
import pytest
import yaml
from tls_files import write_web_config

from ray_accel.exporter import exposure
from ray_accel.exporter.cluster.actors import DeploySettings
from ray_accel.exporter.cluster.registry import AgentRecord
from ray_accel.exporter.cluster.sd_file import scrape_job, target_groups
from ray_accel.exporter.exposure import Exposure, ExposureError, ExposureSettings
from ray_accel.exporter.web_auth import BasicUsers

RAY_TOKEN = "the-ray-token"


@pytest.fixture
def ray_token_on(monkeypatch):
    monkeypatch.setattr(exposure, "cluster_token", lambda: RAY_TOKEN)


@pytest.mark.parametrize(("host", "deployed", "token", "metrics"), [
    ("127.0.0.1", False, None, "none"),      # a local agent: open, as before
    ("127.0.0.1", True, RAY_TOKEN, "none"),  # deployed on a loopback cluster
    ("10.1.2.3", False, RAY_TOKEN, "token"),
    ("0.0.0.0", True, RAY_TOKEN, "token"),
])
def test_defaults(ray_token_on, host, deployed, token, metrics):
    resolved = Exposure(host, ExposureSettings(), deployed=deployed)
    assert (resolved.token, resolved.metrics_auth) == (token, metrics)
    assert resolved.policy.guarded("/api/v1/snapshot") is (token is not None)
    assert resolved.policy.guarded("/metrics") is (token is not None and metrics == "token")
    assert not resolved.policy.guarded("/healthz")


def test_token_file_wins_and_metrics_auth_is_explicit(ray_token_on, tmp_path):
    (tmp_path / "token").write_text("  from-file \n")
    resolved = Exposure("10.1.2.3", ExposureSettings(metrics_auth="none",
                                                    token_file=str(tmp_path / "token")))
    assert resolved.token == "from-file" and not resolved.policy.guarded("/metrics")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ExposureError, match="is empty"):
        Exposure("10.1.2.3", ExposureSettings(token_file=str(tmp_path / "empty")))
    with pytest.raises(ExposureError, match="metrics auth must be one of"):
        ExposureSettings(metrics_auth="maybe")


def test_basic_auth_users_guard_metrics_by_default(tmp_path):
    web = write_web_config(tmp_path / "web.yml", users={"prometheus": "pw"})
    resolved = Exposure("127.0.0.1", ExposureSettings(web_config_file=str(web)))
    assert resolved.token is None and resolved.metrics_auth == "token"
    assert resolved.policy.guarded("/metrics") and not resolved.policy.guarded("/healthz")
    opened = Exposure("127.0.0.1", ExposureSettings(metrics_auth="none",
                                                   web_config_file=str(web)))
    assert not opened.policy.guarded("/metrics") and opened.policy.guarded("/api/v1/snapshot")


def test_a_password_longer_than_bcrypt_reads_is_refused_as_wrong_not_as_an_error():
    users = BasicUsers({"prom": bcrypt.hashpw(b"pw", bcrypt.gensalt(4))})

    def basic(password: str) -> str:
        return "Basic " + base64.b64encode(f"prom:{password}".encode()).decode()

    async def go() -> list[bool]:
        return [await users.check(basic(password))
                for password in ("pw", "pw" + "x" * 100, "y" * 73, "wrong")]

    assert asyncio.run(go()) == [True, False, False, False]


def test_no_token_to_require_is_refused(monkeypatch):
    monkeypatch.setattr(exposure, "cluster_token", lambda: None)
    with pytest.raises(ExposureError, match="no token to require"):
        Exposure("10.1.2.3", ExposureSettings(metrics_auth="token"))
    assert Exposure("10.1.2.3", ExposureSettings()).token is None  # default: open, with a warning


def test_deploy_settings_reach_the_agents():
    settings = DeploySettings(metrics_auth="none", web_config_file="/etc/ray-accel/web.yml")
    config = settings.agent_config("ab" * 28, "10.0.0.7", "10.0.0.1:6379")
    assert config.deployed and config.host == "10.0.0.7"
    assert config.exposure == ExposureSettings(metrics_auth="none",
                                               web_config_file="/etc/ray-accel/web.yml")


def _record(url: str, node: str) -> AgentRecord:
    return AgentRecord(node_id=node * 56, node_ip="10.0.0.7", url=url, pid=1, hostname="h",
                       started_at=time.time(), heartbeat_at=time.time(), heartbeat_s=10,
                       simulated=False, deployed=True)


def test_discovery_marks_tls_agents_and_the_scrape_job_carries_the_token(tmp_path):
    groups = target_groups([_record("https://10.0.0.7:9478", "a"),
                            _record("http://10.0.0.8:9478", "b")])
    assert groups[0]["labels"]["__scheme__"] == "https"
    assert "__scheme__" not in groups[1]["labels"]
    (tmp_path / "token").write_text("t")
    (tmp_path / "sd.json").write_text("[]")
    job = scrape_job(str(tmp_path / "sd.json"), str(tmp_path / "token"))
    assert job["authorization"] == {"type": "Bearer", "credentials_file": str(tmp_path / "token")}
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    checked = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
