"""A Ray workload driver for tests (`ray_accel.demo.workload` as one Ray job) and its holders."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ray_accel.demo.local_cluster import LocalRayCluster


@dataclass
class Driver:
    """A workload driver process: one Ray job."""

    process: subprocess.Popen
    out: Path

    @property
    def identities(self) -> dict:
        return json.loads((self.out / "identities.json").read_text())

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def expect(self, reply: str) -> None:
        """Read the driver's output (Ray's own warnings included) up to `reply`."""
        for line in self.process.stdout:
            if line.strip() == reply:
                return
        raise AssertionError(f"driver ended without saying {reply!r}")

    def command(self, line: str, reply: str) -> None:
        self.send(line)
        self.expect(reply)

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_driver(cluster: LocalRayCluster, out: Path, roles: str) -> Driver:
    process = subprocess.Popen(
        [sys.executable, "-m", "ray_accel.demo.workload", "--address",
         cluster.gcs_address, "--out", str(out), "--roles", roles],
        env=cluster.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    driver = Driver(process, out)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.strip() == "workload-ready":
            return driver
        if not line and process.poll() is not None:
            break
    driver.stop()
    raise RuntimeError(f"workload {roles} did not start")


def holders_by_pid(doc: dict) -> dict[int, tuple[dict, dict]]:
    """pid -> (holder entry, device) for every Ray holder in a snapshot."""
    return {h["pid"]: (h, d) for d in doc["devices"] for h in d.get("holders", [])}
