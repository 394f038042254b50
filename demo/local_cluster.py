"""A private local Ray cluster (for the demo and the tests): `ray start`, stopped by pid.

Each cluster lives under a temp dir of its own with its own auth token, and is
stopped by killing the processes that carry its temp dir or GCS port (and their
children), never with `ray stop`, which would stop every Ray cluster on the
machine. The calling process reaches the cluster the way the agent does: the
token file is in RAY_AUTH_TOKEN_PATH and RAY_AUTH_MODE is left for the agent's
Ray discovery to turn on.

Every node listens on 127.0.0.1 only. `ray start` would replace a loopback node
address with the machine's network address, and refuses to add nodes to a
cluster told to stay local (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which makes Ray
resolve "127.0.0.1" to itself); nodes are therefore started through Ray's own
CLI entry point with the node address pinned, and every process of the cluster
and every client given `env` runs with that variable at 0.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ray._common.network_utils import find_free_port
from ray._private import ray_constants
from ray._raylet import AuthenticationTokenLoader

STARTUP_TIMEOUT_S = 120
_CLIENT_VARIABLES = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_MODE")
LOOPBACK = "127.0.0.1"
_STAY_LOCAL = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
# `ray start`, with the node address pinned to loopback and worker nodes allowed.
_RAY_START = """
import sys
from ray._private import ray_constants, services
ray_constants.ENABLE_RAY_CLUSTER = True
services.get_node_ip_address = lambda address=None: "127.0.0.1"
from ray.scripts.scripts import main
sys.argv[0] = "ray"
sys.exit(main())
"""


def processes() -> dict[int, tuple[list[str], int, str]]:
    """pid -> (command line, parent pid, state) of every readable process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            stat = Path(f"/proc/{entry}/stat").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        found[int(entry)] = (cmdline.split("\0")[:-1], int(fields[1]), fields[0])
    return found


def pid_of(*needles: str) -> int:
    """The one live process whose command line holds every needle."""
    for pid, (cmdline, _, state) in processes().items():
        joined = " ".join(cmdline)
        if state != "Z" and all(needle in joined for needle in needles):
            return pid
    raise AssertionError(f"no process with {needles}")


def is_raylet(cmdline: list[str]) -> bool:
    return bool(cmdline) and cmdline[0].endswith("/raylet")


def node_id_of(cmdline: list[str]) -> str:
    return next((a.partition("=")[2] for a in cmdline if a.startswith("--node_id=")), "")


def with_descendants(pids: set[int], live: dict[int, tuple[list[str], int, str]]) -> set[int]:
    """`pids` and every process below them among `live` (as `processes()` lists them)."""
    pids = set(pids)
    while children := {p for p, (_, ppid, _) in live.items() if ppid in pids} - pids:
        pids |= children
    return pids


def _descendants_of_marked(marks: list[str]) -> set[int]:
    live = {p: v for p, v in processes().items() if v[2] != "Z" and p != os.getpid()}
    marked = {p for p, (cmd, _, _) in live.items() if any(m in " ".join(cmd) + " " for m in marks)}
    return with_descendants(marked, live)


def stop_marked(marks: list[str]) -> None:
    """Stop the processes carrying any of `marks`; a raylet may start workers meanwhile."""
    for attempt in range(6):
        pids = _descendants_of_marked(marks)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM if attempt == 0 else signal.SIGKILL)
        time.sleep(2 if attempt == 0 else 0.5)


class LocalRayCluster:
    """A head node (and optionally more nodes) on this machine, with token auth on."""

    def __init__(self, prefix: str = "rc-") -> None:
        # A short root: Ray's unix socket paths live under it.
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.token = self.root / "token"
        self.token.write_text(uuid.uuid4().hex)
        self.token.chmod(0o600)
        self.env = {k: v for k, v in os.environ.items() if k not in _CLIENT_VARIABLES}
        self.env.update(RAY_TMPDIR=str(self.root), RAY_AUTH_MODE="token",
                        RAY_AUTH_TOKEN_PATH=str(self.token), **_STAY_LOCAL)
        self.gcs_port = find_free_port()
        self.gcs_address = f"{LOOPBACK}:{self.gcs_port}"
        self._saved_env: dict[str, str | None] = {}
        self._saved_enable_cluster: bool | None = None

    @property
    def marks(self) -> list[str]:
        # The temp dir, or the GCS port (the Ray Client server carries only that).
        return [str(self.root), f":{self.gcs_port} "]

    def start_head(self, env: dict[str, str] | None = None, *args: str) -> None:
        """`ray start --head` with free ports, the dashboard on, and `args` added."""
        self._ray_start(
            {**self.env, **(env or {})}, "--head", f"--port={self.gcs_port}",
            "--include-dashboard=true", f"--dashboard-port={find_free_port()}",
            f"--ray-client-server-port={find_free_port()}",
            f"--dashboard-agent-listen-port={find_free_port()}", *args,
        )
        self._enter_client_environment()

    def session_dir(self) -> str:
        """The head node's session folder (Ray's discovery file and logs are there)."""
        from ..exporter.cluster.gcs import ClusterGcs

        with ClusterGcs(self.gcs_address) as gcs:
            return gcs.head().session_dir

    def add_node(self, env: dict[str, str] | None = None, *args: str) -> str:
        """Start another node of the cluster on this machine; returns its node id."""
        before = {node_id_of(cmd) for cmd, _, _ in processes().values() if is_raylet(cmd)}
        self._ray_start({**self.env, **(env or {})}, f"--address={self.gcs_address}",
                        f"--dashboard-agent-listen-port={find_free_port()}", *args)
        started = {node_id_of(cmd) for cmd, _, _ in processes().values()
                   if is_raylet(cmd) and f"--gcs-address={self.gcs_address}" in cmd}
        (node_id,) = started - before
        return node_id

    def stop(self) -> None:
        """Stop every process of this cluster and restore this process's environment."""
        stop_marked(self.marks)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self._saved_enable_cluster is not None:
            ray_constants.ENABLE_RAY_CLUSTER = self._saved_enable_cluster
        AuthenticationTokenLoader.instance().reset_cache()
        shutil.rmtree(self.root, ignore_errors=True)

    def _enter_client_environment(self) -> None:
        for name in (*_CLIENT_VARIABLES, "RAY_TMPDIR", "RAY_AUTH_TOKEN_PATH", *_STAY_LOCAL):
            self._saved_env.setdefault(name, os.environ.get(name))
        for name in _CLIENT_VARIABLES:
            os.environ.pop(name, None)
        os.environ.update(RAY_TMPDIR=str(self.root), RAY_AUTH_TOKEN_PATH=str(self.token),
                          **_STAY_LOCAL)
        # Ray reads that variable once, at import: tell an already imported Ray too,
        # or it turns the cluster's loopback address into the machine's address.
        self._saved_enable_cluster = ray_constants.ENABLE_RAY_CLUSTER
        ray_constants.ENABLE_RAY_CLUSTER = False
        AuthenticationTokenLoader.instance().reset_cache()

    @staticmethod
    def _ray_start(env: dict[str, str], *args: str) -> None:
        result = subprocess.run(
            [sys.executable, "-c", _RAY_START, "start", "--disable-usage-stats",
             f"--node-ip-address={LOOPBACK}", *args],
            env=env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError(f"ray start {args} failed:\n{result.stdout}\n{result.stderr}")
