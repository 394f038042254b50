"""A real Prometheus server for tests: config text in, base URL out, query helpers.

    with PrometheusServer(config_yaml, tmp_path, rule_files={"alerts.yml": text}) as prom:
        prom.wait_until(lambda: prom.query("up"), "a scrape")
        prom.query('sum(up{job="x"})')

It listens on 127.0.0.1 on a free port, keeps its data in a folder of the
test's, and is stopped by pid on exit. Rule files are written next to the
config, so the config refers to them by bare name.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrometheusError(RuntimeError):
    """Prometheus answered a query with an error (e.g. a parse error)."""


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0,
               every: float = 0.5) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, ValueError, AssertionError, PrometheusError) as error:
            last = error
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


class PrometheusServer:
    """`prometheus` with the given config (YAML text) and rule files, on a free port; its
    TSDB in `folder`/tsdb. `extra_flags` are added to its command line; `start_timeout_s`
    is how long it may take to become ready (a large TSDB takes longer)."""

    def __init__(self, config: str, folder: Path, rule_files: Mapping[str, str] | None = None,
                 binary: str = PROMETHEUS, extra_flags: tuple[str, ...] = (),
                 start_timeout_s: float = 30.0) -> None:
        self.folder = folder
        self.config_path = folder / "prometheus.yml"
        self.binary = binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._config = config
        self._rule_files = dict(rule_files or {})
        self._extra_flags = extra_flags
        self._start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self.log_path = folder / "prometheus.log"

    def __enter__(self) -> PrometheusServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, text in self._rule_files.items():
            (self.folder / name).write_text(text)
        self.config_path.write_text(self._config)
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.folder / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
                 *self._extra_flags],
                stdout=subprocess.DEVNULL, stderr=log, cwd=self.folder)
        try:
            wait_until(self._ready, "Prometheus ready", timeout=self._start_timeout_s, every=0.2)
        except AssertionError:
            self.__exit__()
            raise AssertionError(
                "Prometheus did not start:\n" + self.log_path.read_text()) from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError("Prometheus exited:\n" + self.log_path.read_text())
        with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
            return response.status == 200

    # ------------------------------------------------------------- HTTP API

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; returns `data`, raises PrometheusError on an error answer."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: "
                                  f"{body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector's samples; a scalar as one sample)."""
        data = self.api("query", query=promql)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, promql: str, seconds: float = 60, step: float = 5
                    ) -> list[dict[str, Any]]:
        """A range query over the last `seconds`."""
        end = time.time()
        return self.api("query_range", query=promql, start=f"{end - seconds:.3f}",
                        end=f"{end:.3f}", step=f"{step:g}")["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        """Values of `label` on the series matching `match` (Grafana's label_values)."""
        return self.api(f"label/{urllib.parse.quote(label)}/values", **{"match[]": match})

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing)."""
        return self.api("alerts")["alerts"]

    def firing(self, name: str | None = None) -> list[dict[str, Any]]:
        """Firing alerts, of one rule when `name` is given."""
        return [a for a in self.alerts()
                if a["state"] == "firing" and name in (None, a["labels"]["alertname"])]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule, with its health and last error."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def targets(self, job: str | None = None) -> list[dict[str, Any]]:
        """Active scrape targets, of one job when given."""
        found = self.api("targets")["activeTargets"]
        return [t for t in found if job in (None, t["labels"].get("job"))]

    def wait_until(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        """`wait_until` with this server's log in the failure message."""
        try:
            return wait_until(check, what, timeout)
        except AssertionError as error:
            raise AssertionError(f"{error}\nPrometheus log:\n{self.log_path.read_text()}") from None
