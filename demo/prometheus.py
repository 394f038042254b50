"""The demo's Prometheus: Debian's server on loopback, scraping Ray and the agent.

It reads both discovery files of the demo's Ray session (Ray's own
`prom_metrics_service_discovery.json` and the agents' file next to it,
exporter/cluster/sd_file.py), loads the generated alert rules with demo
thresholds short enough for the idle-allocation alert to fire within about a
minute of the idle actor starting, and the recording rules the tab's long ranges
read, and keeps its data in a folder of the demo's.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml
from ray._common.network_utils import find_free_port

from ..exporter.cluster.sd_file import default_path, scrape_job
from ..grafana.alerts import recording
from ..grafana.alerts.rules import AlertConfig, groups
from ..grafana.alerts.rules_file import render
from ..grafana.thresholds import Thresholds
from .local_cluster import LOOPBACK

DEBIAN_BINARY = "/usr/bin/prometheus"
RAY_DISCOVERY_FILE = "prom_metrics_service_discovery.json"
SCRAPE_INTERVAL = "5s"
# Production waits 15 minutes before calling a held device idle; the demo cannot.
DEMO_THRESHOLDS = {"idle_allocation_for": "30s"}
RULES_FILE = "ray-accel-alerts.yml"
RECORDING_FILE = "ray-accel-recording.yml"  # what the tab reads over 6 h and longer
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
MISSING = ("Prometheus is not installed (Debian's prometheus package; tools/system-deps.sh "
           "installs it): the demo runs without Prometheus and its alerts.")


def find_binary() -> str | None:
    """The prometheus server on PATH, else Debian's; None when neither is there."""
    found = shutil.which("prometheus")
    if found:
        return found
    return DEBIAN_BINARY if Path(DEBIAN_BINARY).is_file() else None


def demo_rules() -> str:
    """The generated alert rules, with the demo's thresholds."""
    thresholds = Thresholds().with_overrides(DEMO_THRESHOLDS)
    return render(groups(AlertConfig(thresholds)))


def demo_config(session_dir: Path) -> dict:
    """Scrape Ray's targets and the registered agents (without a token: on loopback the
    agent's /metrics is open) through the session's discovery files."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [RULES_FILE, RECORDING_FILE],
        "scrape_configs": [
            {"job_name": "ray",
             "file_sd_configs": [{"files": [str(session_dir / RAY_DISCOVERY_FILE)]}]},
            scrape_job(str(default_path(str(session_dir))), token_file=None),
        ],
    }


class DemoPrometheus:
    """One Prometheus server for the demo, in `folder`, stopped by `stop()`."""

    def __init__(self, binary: str, folder: Path, session_dir: Path,
                 port: int | None = None) -> None:
        self.binary = binary
        self.folder = folder
        self.session_dir = session_dir
        self.port = port or find_free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.log_path = folder / "prometheus.log"
        self._process: subprocess.Popen | None = None

    @property
    def alerts_url(self) -> str:
        return f"{self.url}/alerts"

    def start(self) -> None:
        """Write the configuration and rules, and start the server (not waiting for it)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / RULES_FILE).write_text(demo_rules())
        (self.folder / RECORDING_FILE).write_text(recording.render())
        config = self.folder / "prometheus.yml"
        config.write_text(yaml.safe_dump(demo_config(self.session_dir), sort_keys=False))
        with self.log_path.open("w") as log:
            self._process = subprocess.Popen(
                [self.binary, f"--config.file={config}",
                 f"--storage.tsdb.path={self.folder / 'data'}",
                 f"--web.listen-address={LOOPBACK}:{self.port}", "--log.level=warn"],
                cwd=self.folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> str | None:
        """None once /-/ready answers, else why not (its exit, or the time it took)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return f"Prometheus exited: {self._last_log_line()}"
            with (contextlib.suppress(OSError),
                  urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply):
                if reply.status == 200:
                    return None
            time.sleep(0.3)
        return f"Prometheus did not get ready within {timeout_s:g} s: {self._last_log_line()}"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after a while)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _last_log_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else "(nothing logged)"
