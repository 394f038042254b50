"""A Ray head on simulated accelerators Ray cannot find itself, and a driver with one actor on them.

Ray counts TPU chips, NeuronCores and Gaudi cards only with the real vendor
stacks, so the head is told its devices with --resources, and its raylet sees
them in the order given (the family's visible-devices variable), so that
slot-to-device mapping is really exercised.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware


@contextmanager
def family_head(hardware: SimulatedHardware, prefix: str, resource: str, variable: str,
                visible: Sequence[str]) -> Iterator[LocalRayCluster]:
    """A Ray head with len(visible) of `resource`, its raylet seeing them as `variable`=visible."""
    local = LocalRayCluster(prefix=prefix)
    try:
        local.start_head({**hardware.environ(), variable: ",".join(visible)}, "--num-cpus=2",
                         f"--resources={json.dumps({resource: len(visible)})}")
        yield local
    finally:
        local.stop()


@contextmanager
def driven_actor(cluster: LocalRayCluster, source: str) -> Iterator[dict]:
    """Runs `source` as a driver of `cluster`; yields the JSON line it prints for its actor.

    The driver (and so its actor) lives until the block ends.
    """
    driver = subprocess.Popen([sys.executable, "-c", source, cluster.gcs_address],
                              env=cluster.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        line = ""
        for line in driver.stdout:
            if line.startswith("{"):
                break
        yield json.loads(line)
    finally:
        driver.stdin.close()
        driver.wait(timeout=60)
