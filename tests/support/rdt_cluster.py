"""What the Ray Direct Transport tests share: a real local Ray head on simulated H200s,
the gloo RDT driver (tests/support/rdt_driver.py) and an agent that pairs the cluster's transfers.

The driver's producer and consumer each hold one (simulated) GPU. `stall S` holds the
consumer's `_ray_system` thread for S seconds, so the producer's send hangs: a stalled
transfer, reported by the agent once older than STALL_AFTER_S.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentProcess
from ray_workload import Driver

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware

DRIVER = Path(__file__).resolve().with_name("rdt_driver.py")
STALL_AFTER_S = 3


class RdtDriver(Driver):
    """The driver process: its actors' identities, and its commands on stdin."""

    def __init__(self, cluster: LocalRayCluster, out: Path, env: dict[str, str] | None = None):
        super().__init__(subprocess.Popen(
            [sys.executable, str(DRIVER), "--address", cluster.gcs_address, "--out", str(out)],
            env={**cluster.env, **(env or {})}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True), out)
        self.expect("rdt-ready", timeout=180)

    def expect(self, prefix: str, timeout: float = 120) -> str:  # type: ignore[override]
        """The driver's next line starting with `prefix`; an abort it did not expect fails."""
        deadline = time.monotonic() + timeout
        for line in self.process.stdout:
            if line.startswith(prefix):
                return line.strip()
            assert not line.startswith("stall-failed"), f"Ray aborted the transfer: {line}"
            assert time.monotonic() < deadline, f"driver did not say {prefix!r} in time"
        raise AssertionError(f"driver ended without saying {prefix!r}")


@pytest.fixture(scope="module")
def hardware(tmp_path_factory) -> SimulatedHardware:
    """Simulated H200s for the head (a module's fixture: `hardware = rdt_cluster.hardware`)."""
    return SimulatedHardware.start("hgx-h200", state_dir=tmp_path_factory.mktemp("hw"))


@pytest.fixture(scope="module")
def driver(cluster, agent, tmp_path_factory) -> Iterator[RdtDriver]:
    """The RDT driver on the module's `cluster`, once its `agent` runs."""
    running = RdtDriver(cluster, tmp_path_factory.mktemp("rdt"))
    yield running
    running.stop()


@contextlib.contextmanager
def rdt_head(hardware: SimulatedHardware, prefix: str,
             env: dict[str, str] | None = None) -> Iterator[LocalRayCluster]:
    """A Ray head on `hardware` (2 CPUs), with `env` added to its processes' environment."""
    local = LocalRayCluster(prefix=prefix)
    try:
        local.start_head({**hardware.environ(), **(env or {})}, "--num-cpus=2")
        yield local
    finally:
        local.stop()


def transfer_agent(cluster: LocalRayCluster, hardware: SimulatedHardware,
                   *args: str) -> AgentProcess:
    """The head node's agent (so it pairs), quick to report a stall; `args` added."""
    return AgentProcess("--ray-address", cluster.gcs_address, "--interval", "0.5",
                        "--attribution-interval", "0.5",
                        "--transfer-stall-after", str(STALL_AFTER_S), *args,
                        env=hardware.environ(), ray=True)
