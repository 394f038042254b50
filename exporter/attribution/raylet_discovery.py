"""Finding the Ray node on this host: raylet processes in /proc and the cluster they belong to.

A raylet tells its node id, GCS address and temp dir on its command line, and
the devices Ray hands out in its environment (CUDA_VISIBLE_DEVICES and the
other families' variables). An agent that sees the raylets of other pods (a
KubeRay sidecar with `hostPID`) tells its own pod's by the namespaces a pod's
containers share.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .ray_addresses import canonical, default_temp_dir, port_of, recorded_address
from .ray_errors import RayNotFound, RaySourceError

#: Variables in the raylet's environment that list the devices Ray hands out.
VISIBLE_DEVICE_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "NEURON_RT_VISIBLE_CORES",
    "TPU_VISIBLE_CHIPS",
    "HABANA_VISIBLE_MODULES",
    "NVIDIA_VISIBLE_DEVICES",  # the container's GPUs (exporter/attribution/slots.py)
)


# The namespaces the containers of one Kubernetes pod share (unless it shares the host's).
POD_NAMESPACES = ("net", "ipc", "uts")


@dataclass(frozen=True)
class LocalRaylet:
    """A raylet process on this host, as its command line describes it; `beside`: it shares
    the agent's network, IPC and UTS namespaces (its own pod's, on Kubernetes; every raylet
    on a host without containers)."""

    pid: int
    node_id: str
    gcs_address: str
    temp_dir: str
    started: int
    beside: bool = True


def _flags(cmdline: Iterable[str]) -> dict[str, str]:
    """The top-level `--name=value` arguments of a command line (first one wins)."""
    flags: dict[str, str] = {}
    for argument in cmdline:
        name, equals, value = argument.partition("=")
        if argument.startswith("--") and equals:
            flags.setdefault(name, value)
    return flags


def _read_proc(pid: str, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as proc_file:
            return proc_file.read()
    except OSError:  # gone, or not ours to read
        return None


def _start_ticks(pid: str) -> int:
    """When a process started, in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    stat = _read_proc(pid, "stat") or b""
    fields = stat.rpartition(b")")[2].split()
    return int(fields[19]) if len(fields) > 19 else 0


def pod_namespaces(pid: str) -> tuple[str, ...] | None:
    """The `POD_NAMESPACES` a process is in ("net:[4026532301]", ...); None where they
    cannot be read (gone, or not ours to look at)."""
    try:
        return tuple(os.readlink(f"/proc/{pid}/ns/{name}") for name in POD_NAMESPACES)
    except OSError:
        return None


def is_raylet(cmdline: list[str]) -> bool:
    """Whether a command line is a raylet's: its executable's name says so, as Ray checks."""
    return bool(cmdline) and "raylet" in os.path.basename(cmdline[0])


def local_raylets() -> list[LocalRaylet]:
    """Every raylet process on this host that tells its node id on its command line."""
    raylets = []
    own = pod_namespaces("self")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        raw = _read_proc(pid, "cmdline")
        cmdline = raw.decode(errors="replace").split("\0")[:-1] if raw else []
        if not is_raylet(cmdline):
            continue
        flags = _flags(cmdline)
        if not flags.get("--node_id"):
            continue
        raylets.append(LocalRaylet(
            pid=int(pid), node_id=flags["--node_id"],
            gcs_address=flags.get("--gcs-address", ""), temp_dir=flags.get("--temp_dir", ""),
            started=_start_ticks(pid),
            beside=own is None or pod_namespaces(pid) in (own, None)))
    return raylets


def detected_address(raylets: list[LocalRaylet], node_id: str | None) -> str:
    """The GCS address of the local cluster, found the way `ray.init("auto")` finds it.

    In order: the cluster of the raylet with `node_id`; the address the last
    `ray start` recorded in <ray temp dir>/ray_current_cluster; the one cluster
    whose raylets on this host use this Ray temp dir (clusters started with
    `ray.init()` record no address). The temp dir honours RAY_TMPDIR like Ray.
    """
    if node_id is not None:
        for raylet in raylets:
            if raylet.node_id == node_id and raylet.gcs_address:
                return raylet.gcs_address
    temp_root = os.path.realpath(default_temp_dir())
    recorded = recorded_address(temp_root)
    if recorded:
        if not any(port_of(r.gcs_address) == port_of(recorded) for r in raylets):
            raise RayNotFound(
                f"{temp_root}/ray_current_cluster names {recorded}, but no raylet of that "
                "cluster runs on this host (stopped cluster?)"
            )
        return canonical(recorded)
    clusters = sorted({r.gcs_address for r in raylets
                       if r.gcs_address and os.path.realpath(r.temp_dir) == temp_root})
    if len(clusters) == 1:
        return clusters[0]
    if clusters:
        raise RayNotFound(
            f"several Ray clusters run on this host ({', '.join(clusters)}); "
            "pass the address of one (or set RAY_ADDRESS)"
        )
    raise RayNotFound(
        f"no Ray node runs on this host: RAY_ADDRESS is unset, {temp_root}/ray_current_cluster "
        f"does not exist and no raylet uses the Ray temp dir {temp_root}"
    )


def choose_node(nodes: list[Any], raylets: dict[str, LocalRaylet], node_id: str | None,
                gcs_address: str) -> Any:
    """The node (a `GcsNodeInfo`) to watch: `node_id` if given, else the agent's own pod's
    (`LocalRaylet.beside`), else the head, else the oldest."""
    if node_id is not None:
        for node in nodes:
            if node.node_id.hex() == node_id:
                return node
        raise RayNotFound(
            f"node {node_id} is not an alive node of the cluster at {gcs_address} "
            "with its raylet on this host"
        )
    if not nodes:
        raise RayNotFound(f"no alive node of the cluster at {gcs_address} runs on this host")
    # Then the same preference as Ray's get_node_to_connect_for_driver when several nodes
    # of one cluster share a host; pass node_id to pick another.
    def preference(node: Any) -> tuple[bool, bool, int, str]:
        raylet = raylets[node.node_id.hex()]
        return not raylet.beside, not node.is_head_node, raylet.started, node.node_id.hex()

    return min(nodes, key=preference)


def parse_visible(value: str | None) -> tuple[str, ...] | None:
    """A visible-devices value as Ray parses it: None when unset, () for none."""
    if value is None:
        return None
    if value.strip() in ("", "NoDevFiles"):
        return ()
    return tuple(entry.strip() for entry in value.split(","))


def _process_environ(pid: int) -> dict[str, str]:
    """The environment a process started with, from /proc/<pid>/environ."""
    path = f"/proc/{pid}/environ"
    try:
        with open(path, "rb") as environ_file:
            raw = environ_file.read()
    except FileNotFoundError as error:
        raise RaySourceError(f"the raylet (pid {pid}) exited while being read") from error
    except PermissionError as error:
        raise RaySourceError(
            f"cannot read {path}: run the agent as the raylet's user or as root"
        ) from error
    environ = {}
    for entry in raw.split(b"\0"):
        name, equals, value = entry.decode(errors="surrogateescape").partition("=")
        if equals:
            environ[name] = value
    return environ


def visible_devices(raylet_pid: int) -> Mapping[str, tuple[str, ...] | None]:
    """Each of `VISIBLE_DEVICE_VARIABLES` in the raylet's environment, parsed."""
    environ = _process_environ(raylet_pid)
    return MappingProxyType(
        {name: parse_visible(environ.get(name)) for name in VISIBLE_DEVICE_VARIABLES}
    )
