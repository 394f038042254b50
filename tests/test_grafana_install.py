"""Installing the boards into a Ray session's Grafana provisioning, and keeping them there.

The session folders here are made up to look like the ones Ray 2.60's dashboard
writes; test_grafana_prometheus.py installs into a real Ray head's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from ray_accel.grafana.generate import board_files
from ray_accel.grafana.install import RayGrafana, install, missing, watch

BOARDS = {Path(name).name: text for name, text in board_files().items()}


def ray_session(root: Path) -> Path:
    """A session dir with the Grafana configuration Ray's dashboard writes at start."""
    session = root / "session_2025-01-01_00-00-00_000000_1"
    grafana = session / "metrics" / "grafana"
    (grafana / "provisioning" / "dashboards").mkdir(parents=True)
    (grafana / "dashboards").mkdir()
    (grafana / "grafana.ini").write_text("[paths]\n")
    (grafana / "provisioning" / "dashboards" / "default.yml").write_text("providers: []\n")
    (grafana / "dashboards" / "default_grafana_dashboard.json").write_text("{}")
    return session


def test_install_adds_a_provider_and_boards_beside_rays(tmp_path):
    target = RayGrafana.for_session(ray_session(tmp_path))
    written = install(target, BOARDS)
    assert target.provider in written
    provider = yaml.safe_load(target.provider.read_text())["providers"][0]
    assert provider["folder"] == "Ray"
    assert provider["options"]["path"] == str(target.boards_dir)
    assert sorted(p.name for p in target.boards_dir.glob("*.json")) == sorted(BOARDS)
    # Ray's own files are untouched
    assert (target.providers_dir / "default.yml").read_text() == "providers: []\n"
    assert (target.grafana_dir / "dashboards" / "default_grafana_dashboard.json").exists()
    assert missing(target, BOARDS) == []


def test_install_removes_boards_it_no_longer_generates(tmp_path):
    target = RayGrafana.for_session(ray_session(tmp_path))
    target.boards_dir.mkdir(parents=True)
    (target.boards_dir / "ray-accel-retired.json").write_text("{}")
    install(target, BOARDS)
    assert not (target.boards_dir / "ray-accel-retired.json").exists()


def test_rays_metrics_output_root_is_honoured(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_METRICS_OUTPUT_ROOT", str(tmp_path / "elsewhere"))
    assert RayGrafana.for_session(tmp_path / "session").grafana_dir == \
        tmp_path / "elsewhere" / "grafana"


def test_watch_puts_the_boards_back_after_ray_rewrites_its_config(tmp_path):
    target = RayGrafana.for_session(ray_session(tmp_path))
    installs: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(target, BOARDS, stop, 0.05),
                               kwargs={"settle_s": 0.05,
                                       "on_install": lambda paths: installs.append(len(paths))})
    watcher.start()
    try:
        _wait(lambda: installs == [len(BOARDS) + 1], "first install")
        # What Ray's dashboard does when it (re)starts: delete the folder, write its own files.
        shutil.rmtree(target.grafana_dir)
        target.providers_dir.mkdir(parents=True, exist_ok=True)
        (target.providers_dir / "default.yml").write_text("providers: []\n")
        _wait(lambda: len(installs) >= 2 and not missing(target, BOARDS), "reinstall")
        count = len(installs)
        (target.boards_dir / next(iter(BOARDS))).write_text("{}")  # edited by someone
        _wait(lambda: len(installs) > count and not missing(target, BOARDS), "repair")
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert not watcher.is_alive()
    assert (target.providers_dir / "default.yml").exists()


def test_cli_installs_into_a_given_session_dir(tmp_path):
    session = ray_session(tmp_path)
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "grafana",
                             "--session-dir", str(session)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    target = RayGrafana.for_session(session)
    assert str(target.provider) in result.stdout
    assert missing(target, BOARDS) == []


def test_cli_says_when_there_is_no_ray_node(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "grafana",
                             "--address", "http://not-a-gcs:1"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert "no Ray node found" in result.stderr and "--session-dir" in result.stderr


@pytest.mark.parametrize("args", [["--out", "x", "--watch"], ["--watch-interval", "0"]])
def test_cli_refuses_contradictions(args, tmp_path):
    result = subprocess.run([sys.executable, "-m", "ray_accel.exporter.cli", "grafana", *args],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert not (tmp_path / "x").exists()


def _wait(check, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout} s")
