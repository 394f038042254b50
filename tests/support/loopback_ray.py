"""A private multi-node Ray cluster on 127.0.0.1 whose clients are all subprocesses.

The demo's cluster (loopback only, a temp dir and token of its own, stopped by
pid), without a dashboard, leaving this process's environment alone.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

from ray._common.network_utils import find_free_port

from ray_accel.demo.local_cluster import (
    LocalRayCluster,
    is_raylet,
    node_id_of,
    processes,
)


class LoopbackCluster(LocalRayCluster):
    """Head and more nodes on 127.0.0.1 with token auth on; `env` reaches it as a client.

    Unlike its base, it leaves this process's environment alone: clients run
    as subprocesses with `env`.
    """

    def start_head(self, env: dict[str, str] | None = None, *args: str) -> str:
        """`ray start --head` (no dashboard) with `args` added; returns the node id."""
        return self._start(env, "--head", f"--port={self.gcs_port}", "--include-dashboard=false",
                           f"--ray-client-server-port={find_free_port()}", *args)

    def add_node(self, env: dict[str, str] | None = None, *args: str) -> str:
        """Start another node of the cluster; returns its node id."""
        return self._start(env, f"--address={self.gcs_address}", *args)

    def _raylets(self) -> set[str]:
        return {node_id_of(cmd) for cmd, _, _ in processes().values()
                if is_raylet(cmd) and f"--gcs-address={self.gcs_address}" in cmd}

    def _start(self, env: dict[str, str] | None, *args: str) -> str:
        before = self._raylets()
        self._ray_start({**self.env, **(env or {})},
                        f"--dashboard-agent-listen-port={find_free_port()}", *args)
        (node_id,) = self._raylets() - before
        return node_id


@contextlib.contextmanager
def deployed_cluster(nodes: Sequence[tuple[Hashable, Any]], prefix: str
                     ) -> Iterator[tuple[LoopbackCluster, dict[str, Hashable]]]:
    """One node per (label, scenario) on its simulated hardware, the first the head, and
    `ray-accel deploy` run on them; yields the cluster and node id -> label."""
    from ray_accel.exporter.simulate import SimulatedHardware

    hardware = [SimulatedHardware.start(scenario) for _, scenario in nodes]
    cluster = LoopbackCluster(prefix=prefix)
    try:
        labels = {cluster.start_head(hardware[0].environ(), "--num-cpus=1"): nodes[0][0]}
        for hw, (label, _) in zip(hardware[1:], nodes[1:], strict=True):
            labels[cluster.add_node(hw.environ(), "--num-cpus=0")] = label
        deployed = subprocess.run(
            [sys.executable, "-m", "ray_accel.exporter.cli", "deploy", "--address",
             cluster.gcs_address, "--interval", "0.5", "--register-interval", "1",
             "--wait", "120"],
            env=cluster.env, capture_output=True, text=True, timeout=240)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        yield cluster, labels
    finally:
        cluster.stop()
        for hw in hardware:
            hw.close()


def get_json(url: str, token: str) -> Mapping[str, Any]:
    """A JSON answer of an endpoint behind the cluster's token."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


@contextlib.contextmanager
def standalone_dashboard(cluster: LoopbackCluster, ready: Callable[[list], bool]
                         ) -> Iterator[Callable[[str], Mapping[str, Any]]]:
    """`ray-accel dashboard` on the cluster, asked for its nodes until `ready(nodes)` (90 s
    at most); yields `get(endpoint)`, the JSON of /accelerators/api/<endpoint>."""
    port = find_free_port()
    token = cluster.token.read_text().strip()
    api = f"http://127.0.0.1:{port}/accelerators/api"
    dashboard = subprocess.Popen(
        [sys.executable, "-m", "ray_accel.exporter.cli", "dashboard", "--address",
         cluster.gcs_address, "--port", str(port), "--refresh", "1"],
        env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(90):
            try:
                nodes = get_json(f"{api}/nodes", token)["nodes"]
            except OSError:
                nodes = []
            if ready(nodes):
                break
            time.sleep(1)
        yield lambda endpoint: get_json(f"{api}/{endpoint}", token)
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=15)
