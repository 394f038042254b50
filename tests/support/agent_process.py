"""Runs `ray-accel agent` as a real subprocess for end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

_URL = re.compile(r"serving (https?://\S+)/metrics")


class AgentProcess:
    """`ray-accel agent ...` on a free port; `url` is set once it serves.

    Ray attribution is off unless `ray=True`, so that a Ray cluster some other
    test runs on this machine is not picked up.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None, ray: bool = False) -> None:
        self.args = ["agent", "--port", "0", *([] if ray else ["--no-ray"]), *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.output: list[str] = []

    def __enter__(self) -> AgentProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ray_accel.exporter.cli", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            if match := _URL.search(line):
                self.url = match.group(1)
                return self
        self.__exit__()
        raise RuntimeError("agent did not start:\n" + "".join(self.output))

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def get(self, path: str, accept: str | None = None, timeout: float = 5.0,
            method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url + path, method=method)
        if accept:
            request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def json(self, path: str) -> dict:
        status, _, body = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def wait_for(self, predicate, timeout: float = 20.0, path: str = "/api/v1/snapshot"):
        """Poll a JSON endpoint until `predicate(doc)` is true; return that document."""
        deadline = time.monotonic() + timeout
        doc = None
        while time.monotonic() < deadline:
            status, _, body = self.get(path)
            if status == 200:
                doc = json.loads(body)
                if predicate(doc):
                    return doc
            time.sleep(0.2)
        raise AssertionError(f"condition not met within {timeout} s; last: {doc}")


def write_scenario(tmp_path: Path, doc: dict) -> str:
    path = tmp_path / f"{doc.get('name', 'scenario')}.json"
    path.write_text(json.dumps(doc))
    return str(path)
