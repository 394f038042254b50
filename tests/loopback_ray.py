"""A private multi-node Ray cluster on 127.0.0.1 whose clients are all subprocesses.

The demo's cluster (loopback only, a temp dir and token of its own, stopped by
pid), without a dashboard, leaving this process's environment alone.
"""

from __future__ import annotations

from ray._common.network_utils import find_free_port

from ray_accel.exporter.demo.local_cluster import (
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
