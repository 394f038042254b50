"""The agent's read-only view of the Ray node it runs on.

The agent is a plain process, not a Ray driver: it never calls `ray.init()`
(that would register a job). It reads, on its own cadence:

- the node itself (id, IP, raylet address, labels, session dir) from the GCS,
  and the raylet's visible-device variables from `/proc/<raylet pid>/environ`;
- the workers on the node and the resource slots each holds, from the raylet's
  `NodeManagerService.GetNodeStats`, plus actor class and name from the GCS;
- the RUNNING tasks on the node and the pid running each, from the State API
  served by the head's dashboard.

Every call takes a timeout and raises `RaySourceError` instead of hanging or
leaking gRPC/HTTP errors. Connections are made lazily and dropped on any
failure, so a GCS, raylet or dashboard that comes back works again on the next
call. Verified against Ray 2.60; see docs/ray-internals.md.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import grpc
from google.protobuf.message import Message
from ray._common.network_utils import build_address, parse_address
from ray._common.utils import get_default_ray_temp_dir
from ray._private import ray_constants, services
from ray._private.authentication.authentication_token_setup import (
    maybe_enable_token_auth_if_token_available,
)
from ray._private.grpc_utils import init_grpc_channel
from ray._private.utils import (
    PLACEMENT_GROUP_INDEXED_BUNDLED_RESOURCE_PATTERN,
    PLACEMENT_GROUP_WILDCARD_RESOURCE_PATTERN,
)
from ray._raylet import AuthenticationTokenLoader
from ray.core.generated import (
    common_pb2,
    gcs_pb2,
    gcs_service_pb2,
    gcs_service_pb2_grpc,
    node_manager_pb2,
    node_manager_pb2_grpc,
)
from ray.dashboard.modules.dashboard_sdk import SubmissionClient
from ray.exceptions import AuthenticationError
from ray.util.state.api import StateApiClient
from ray.util.state.common import ListApiOptions, StateResource, TaskState

from .transfers import ActorTask

log = logging.getLogger(__name__)

#: Variables in the raylet's environment that list the devices Ray hands out.
VISIBLE_DEVICE_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "NEURON_RT_VISIBLE_CORES",
    "TPU_VISIBLE_CHIPS",
    "HABANA_VISIBLE_MODULES",
)

_ALIVE = gcs_pb2.GcsNodeInfo.GcsNodeState.ALIVE
# Ray's own limit for messages from its servers; the default 4 MiB is too small
# for the node stats of a busy node.
_GRPC_OPTIONS = (
    *ray_constants.GLOBAL_GRPC_OPTIONS,
    ("grpc.max_receive_message_length", ray_constants.GRPC_CPP_MAX_MESSAGE_SIZE),
)
_TASK_LIST_LIMIT = 10_000
_PLACEMENT_GROUP_BUNDLE_RESOURCE = "bundle"


class RayNotFound(RuntimeError):
    """No Ray node of the requested cluster runs on this host."""


class RaySourceError(RuntimeError):
    """A Ray server (GCS, raylet, dashboard State API) failed, timed out or refused us."""


@dataclass(frozen=True)
class ResourceGrant:
    """One slot of a resource held by a worker: `quantity` < 1 is a fractional share."""

    slot: int
    quantity: float


@dataclass(frozen=True)
class RayWorkerInfo:
    """A worker (or driver) process on this node and the resources it holds.

    `grants` maps a resource name ("GPU", "CPU", "memory", custom ones) to the
    slots held. Placement-group resources are folded into their base name:
    a GPU held through a placement group appears under "GPU". GPU slot i is the
    i-th entry of the raylet's CUDA_VISIBLE_DEVICES (physical index i if unset).
    """

    pid: int
    worker_id: str
    job_id: str
    actor_id: str
    worker_type: str
    grants: Mapping[str, tuple[ResourceGrant, ...]]
    actor_class: str = ""
    actor_name: str = ""


@dataclass(frozen=True)
class RunningTask:
    """A task in state RUNNING on this node and the pid of the worker running it."""

    task_id: str
    name: str
    job_id: str
    actor_id: str
    pid: int


@dataclass(frozen=True)
class LocalRayNode:
    """The Ray node on this host.

    `visible_devices` maps each of `VISIBLE_DEVICE_VARIABLES` to the raylet's
    entries (indices or UUIDs such as "GPU-…"/"MIG-…"), or None when unset.
    """

    node_id: str
    node_ip: str
    raylet_address: str
    gcs_address: str
    session_dir: str
    labels: Mapping[str, str]
    visible_devices: Mapping[str, tuple[str, ...] | None]
    is_head: bool = False


class _Deadline:
    """The time left of one call's budget."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(self._end - time.monotonic(), 0.0)


@dataclass(frozen=True)
class _LocalRaylet:
    """A raylet process on this host, as its command line describes it."""

    pid: int
    node_id: str
    gcs_address: str
    temp_dir: str
    started: int


# --------------------------------------------------------------------------- gRPC


def _rpc_code(error: grpc.RpcError) -> grpc.StatusCode | None:
    # Errors of completed calls are also `grpc.Call`s that carry the status.
    return error.code() if isinstance(error, grpc.Call) else None


def _describe_rpc_error(error: grpc.RpcError, timeout_s: float) -> str:
    code = _rpc_code(error)
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"unreachable ({details})"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within {timeout_s:.1f} s"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return (
            f"rejected our authentication token ({details}); give the agent the "
            "cluster's token through RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
        )
    return f"{code.name if code else 'error'}: {details}"


class _GrpcEndpoint:
    """A gRPC channel to one Ray server, made on first use and dropped on any failure.

    Dropping the channel after a failure means the next call connects afresh
    instead of waiting out gRPC's reconnect backoff (up to two minutes).
    """

    def __init__(self, address: str, role: str) -> None:
        self.address = address
        self.role = role
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def call(
        self,
        stub_class: Callable[[grpc.Channel], Any],
        method: str,
        request: Message,
        timeout_s: float,
    ) -> Any:
        """Make one unary call; any failure becomes a `RaySourceError`."""
        channel = self._connected()
        try:
            return getattr(stub_class(channel), method)(request, timeout=timeout_s)
        except grpc.RpcError as error:
            self._drop(channel)
            if _rpc_code(error) == grpc.StatusCode.UNAUTHENTICATED:
                _forget_token()
            raise RaySourceError(
                f"{self.role} at {self.address}: {method} failed: "
                f"{_describe_rpc_error(error, timeout_s)}"
            ) from error

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _connected(self) -> grpc.Channel:
        with self._lock:
            if self._channel is None:
                self._channel = init_grpc_channel(self.address, options=_GRPC_OPTIONS)
            return self._channel

    def _drop(self, channel: grpc.Channel) -> None:
        with self._lock:
            if self._channel is channel:
                self._channel = None
        channel.close()


# ---------------------------------------------------------------------- discovery


def _enable_token_auth() -> None:
    """Send the cluster's token when one is configured for this process.

    Like `ray.init(address="auto")`: with RAY_AUTH_MODE unset, a token found in
    RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token turns token mode on
    for this process (it sets RAY_AUTH_MODE=token). A cluster without
    authentication ignores the token, so sending it is harmless.
    """
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _forget_token() -> None:
    """Make Ray reload the token on next use (it caches it), in case it was rotated."""
    AuthenticationTokenLoader.instance().reset_cache()


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


def _local_raylets() -> list[_LocalRaylet]:
    """Every raylet process on this host that tells its node id on its command line."""
    raylets = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        raw = _read_proc(pid, "cmdline")
        cmdline = raw.decode(errors="replace").split("\0")[:-1] if raw else []
        if not services._is_raylet_process(cmdline):
            continue
        flags = _flags(cmdline)
        if not flags.get("--node_id"):
            continue
        raylets.append(
            _LocalRaylet(
                pid=int(pid),
                node_id=flags["--node_id"],
                gcs_address=flags.get("--gcs-address", ""),
                temp_dir=flags.get("--temp_dir", ""),
                started=_start_ticks(pid),
            )
        )
    return raylets


def _port(address: str) -> str:
    parsed = parse_address(address)
    return parsed[1] if parsed else ""


def _explicit_address(address: str | None) -> str | None:
    """The address given by the caller or RAY_ADDRESS, canonicalised the way Ray does."""
    if address in (None, "", "auto"):
        address = os.environ.get(ray_constants.RAY_ADDRESS_ENVIRONMENT_VARIABLE) or None
    if address in (None, "auto"):
        return None
    return _canonical(address)


def _canonical(address: str) -> str:
    """host:port with a loopback host replaced by this node's IP, as Ray does."""
    if "://" in address:
        raise RayNotFound(
            f"{address!r} is not a GCS address; give the cluster's host:port (e.g. head:6379)"
        )
    try:
        return services.canonicalize_bootstrap_address(address)
    except ValueError as error:
        raise RayNotFound(f"invalid Ray address {address!r}: {error}") from error


def _detected_address(raylets: list[_LocalRaylet], node_id: str | None) -> str:
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
    temp_root = os.path.realpath(get_default_ray_temp_dir())
    recorded = services.find_bootstrap_address(temp_root)
    if recorded:
        if not any(_port(r.gcs_address) == _port(recorded) for r in raylets):
            raise RayNotFound(
                f"{temp_root}/ray_current_cluster names {recorded}, but no raylet of that "
                "cluster runs on this host (stopped cluster?)"
            )
        return _canonical(recorded)
    clusters = sorted(
        {
            r.gcs_address
            for r in raylets
            if r.gcs_address and os.path.realpath(r.temp_dir) == temp_root
        }
    )
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


def _alive_nodes(
    gcs: _GrpcEndpoint, node_ids: list[str], timeout_s: float
) -> list[gcs_pb2.GcsNodeInfo]:
    """The ALIVE nodes among `node_ids`; with no ids, checks only that the GCS answers."""
    request = gcs_service_pb2.GetAllNodeInfoRequest(
        node_selectors=[
            gcs_service_pb2.GetAllNodeInfoRequest.NodeSelector(node_id=bytes.fromhex(node_id))
            for node_id in node_ids
        ],
        state_filter=_ALIVE,
    )
    if not node_ids:
        request.limit = 1
    reply = gcs.call(
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub, "GetAllNodeInfo", request, timeout_s
    )
    return list(reply.node_info_list) if node_ids else []


def _choose_node(
    nodes: list[gcs_pb2.GcsNodeInfo],
    raylets: dict[str, _LocalRaylet],
    node_id: str | None,
    gcs_address: str,
) -> gcs_pb2.GcsNodeInfo:
    """The node to watch: `node_id` if given, else the head, else the oldest raylet."""
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
    # Same preference as Ray's get_node_to_connect_for_driver when several nodes
    # of one cluster share a host; pass node_id to pick another.
    return min(
        nodes,
        key=lambda n: (not n.is_head_node, raylets[n.node_id.hex()].started, n.node_id.hex()),
    )


def _parse_visible(value: str | None) -> tuple[str, ...] | None:
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


def _visible_devices(raylet_pid: int) -> Mapping[str, tuple[str, ...] | None]:
    environ = _process_environ(raylet_pid)
    return MappingProxyType(
        {name: _parse_visible(environ.get(name)) for name in VISIBLE_DEVICE_VARIABLES}
    )


# -------------------------------------------------------------------- node stats


def _is_nil_id(raw: bytes) -> bool:
    # Ray encodes "no actor" as an ActorID of all 0xff bytes (hex "ffff…").
    return not raw or all(byte == 0xFF for byte in raw)


def _base_resource(name: str) -> str | None:
    """The resource a raw name is held as; None for names that only duplicate others.

    A worker in a placement group holds "GPU_group_<pg>" and, for a chosen
    bundle, also "GPU_group_<i>_<pg>" with the same slots, plus internal
    "bundle_group_…" markers. The wildcard form is kept as "GPU".
    """
    if PLACEMENT_GROUP_INDEXED_BUNDLED_RESOURCE_PATTERN.fullmatch(name):
        return None
    wildcard = PLACEMENT_GROUP_WILDCARD_RESOURCE_PATTERN.fullmatch(name)
    if wildcard is None:
        return name
    base = wildcard.group(1)
    return None if base == _PLACEMENT_GROUP_BUNDLE_RESOURCE else base


def _grants(
    used_resources: Mapping[str, common_pb2.ResourceAllocations],
) -> Mapping[str, tuple[ResourceGrant, ...]]:
    """`CoreWorkerStats.used_resources` as resource -> slots held, sorted by slot."""
    merged: dict[str, dict[int, float]] = {}
    for name, allocations in used_resources.items():
        base = _base_resource(name)
        if base is None:
            continue
        slots = merged.setdefault(base, {})
        for slot in allocations.resource_slots:
            slots[slot.slot] = slots.get(slot.slot, 0.0) + slot.allocation
    return MappingProxyType(
        {
            name: tuple(ResourceGrant(slot, quantity) for slot, quantity in sorted(slots.items()))
            for name, slots in merged.items()
            if slots
        }
    )


def _worker_info(stats: common_pb2.CoreWorkerStats) -> RayWorkerInfo:
    return RayWorkerInfo(
        pid=stats.pid,
        worker_id=stats.worker_id.hex(),
        job_id=stats.job_id.hex(),
        actor_id="" if _is_nil_id(stats.actor_id) else stats.actor_id.hex(),
        worker_type=common_pb2.WorkerType.Name(stats.worker_type),
        grants=_grants(stats.used_resources),
    )


def _seconds(milliseconds: int | None) -> float | None:
    return milliseconds / 1000 if milliseconds else None


def _actor_task(task: TaskState) -> ActorTask:
    return ActorTask(
        task_id=task.task_id, name=task.name or task.func_or_class_name or "",
        state=str(task.state), job_id=task.job_id or "", actor_id=task.actor_id or "",
        parent_task_id=task.parent_task_id or "", node_id=task.node_id or "",
        pid=int(task.worker_pid or 0),
        created_at=_seconds(task.creation_time_ms) or _seconds(task.start_time_ms) or 0.0,
        started_at=_seconds(task.start_time_ms),
    )


def _running_task(task: TaskState) -> RunningTask:
    return RunningTask(
        task_id=task.task_id,
        name=task.name or task.func_or_class_name or "",
        job_id=task.job_id or "",
        actor_id=task.actor_id or "",
        pid=int(task.worker_pid),
    )


# ------------------------------------------------------------------------ sources


class RaySources:
    """Read-only access to the Ray node on this host. Create with `discover()`.

    Safe to call from several threads. Each call opens what it needs lazily and
    drops it on failure, so a server that comes back works on the next call.
    The node's identity is fixed at discovery: a restarted raylet is a new node,
    so call `discover()` again when `workers()` keeps failing.
    """

    def __init__(self, node: LocalRayNode) -> None:
        """Use `discover()`; this only wires connections to an already known node."""
        self.node = node
        self._gcs = _GrpcEndpoint(node.gcs_address, "GCS")
        self._raylet = _GrpcEndpoint(node.raylet_address, "raylet")
        self._lock = threading.Lock()
        self._actor_names: dict[str, tuple[str, str]] = {}
        self._state_client: tuple[str, _BoundStateApiClient] | None = None
        self._closed = False

    @classmethod
    def discover(
        cls, address: str | None = None, node_id: str | None = None, timeout_s: float = 5.0
    ) -> RaySources:
        """Find the Ray node whose raylet runs on this host.

        `address` is the cluster's GCS address (host:port). When None, RAY_ADDRESS
        is used, else the local cluster as `ray.init(address="auto")` finds it.
        `node_id` (hex) picks one of several nodes of the cluster on this host;
        without it the head node is preferred, then the longest-running raylet.

        Raises `RayNotFound` when no such node runs here, `RaySourceError` when
        the GCS cannot be asked or the raylet's environment cannot be read.
        """
        deadline = _Deadline(timeout_s)
        _enable_token_auth()
        raylets = _local_raylets()
        gcs_address = _explicit_address(address) or _detected_address(raylets, node_id)
        gcs = _GrpcEndpoint(gcs_address, "GCS")
        try:
            nodes = _alive_nodes(gcs, [r.node_id for r in raylets], deadline.remaining())
        finally:
            gcs.close()
        by_id = {r.node_id: r for r in raylets}
        chosen = _choose_node(nodes, by_id, node_id, gcs_address)
        raylet = by_id[chosen.node_id.hex()]
        return cls(
            LocalRayNode(
                node_id=chosen.node_id.hex(),
                node_ip=chosen.node_manager_address,
                raylet_address=build_address(chosen.node_manager_address, chosen.node_manager_port),
                gcs_address=gcs_address,
                session_dir=chosen.session_dir,
                labels=MappingProxyType(dict(chosen.labels)),
                visible_devices=_visible_devices(raylet.pid),
                is_head=chosen.is_head_node,
            )
        )

    @classmethod
    def for_cluster(cls, gcs_address: str) -> RaySources:
        """Cluster-wide sources (State API, GCS) for a client that runs no Ray node.

        Only the calls that need no local raylet work (`actor_tasks`, `actor_states`).
        """
        _enable_token_auth()
        return cls(LocalRayNode(node_id="", node_ip="", raylet_address="",
                                gcs_address=_canonical(gcs_address), session_dir="",
                                labels=MappingProxyType({}),
                                visible_devices=MappingProxyType({})))

    def workers(self, timeout_s: float = 2.0) -> list[RayWorkerInfo]:
        """Every worker and driver on this node, with the resource slots each holds.

        One `GetNodeStats` call to the raylet. Actor class and name come from
        the GCS once per actor (then cached); if the GCS cannot answer in the
        time left they stay empty for this call and are asked again next time.
        Note the raylet asks every worker for its stats before replying, so one
        worker that cannot answer (seen with a SIGSTOPped one) makes this call
        time out.
        """
        self._check_open()
        deadline = _Deadline(timeout_s)
        reply = self._raylet.call(
            node_manager_pb2_grpc.NodeManagerServiceStub,
            "GetNodeStats",
            node_manager_pb2.GetNodeStatsRequest(include_memory_info=False),
            deadline.remaining(),
        )
        workers = [_worker_info(stats) for stats in reply.core_workers_stats]
        names = self._names_of({w.actor_id for w in workers if w.actor_id}, deadline)
        return [
            replace(w, actor_class=names[w.actor_id][0], actor_name=names[w.actor_id][1])
            if w.actor_id in names
            else w
            for w in workers
        ]

    def running_tasks(self, timeout_s: float = 5.0) -> list[RunningTask]:
        """The tasks RUNNING on this node, each with the pid that runs it.

        One State API `list_tasks` call (filtered on this node and RUNNING) to
        the head's dashboard, whose address is read from the GCS. The State API
        rounds its timeout to whole seconds, at least one. Task states reach
        the State API about a second after they change (workers batch them).
        """
        self._check_open()
        deadline = _Deadline(timeout_s)
        url, client = self._state_api(deadline)
        options = ListApiOptions(
            limit=_TASK_LIST_LIMIT,
            timeout=max(1, round(deadline.remaining())),
            detail=False,
            filters=[("node_id", "=", self.node.node_id), ("state", "=", "RUNNING")],
        )
        try:
            tasks = client.list(StateResource.TASKS, options, raise_on_missing_output=False)
        except Exception as error:  # requests, JSON and State API errors alike
            with self._lock:
                self._state_client = None
            if isinstance(error, AuthenticationError):
                _forget_token()
            raise RaySourceError(f"State API at {url} failed to list tasks: {error}") from error
        # A task between scheduling and start may not have its worker pid yet.
        return [_running_task(task) for task in tasks if task.worker_pid]

    def actor_tasks(self, timeout_s: float = 5.0) -> list[ActorTask]:
        """Every actor task of the cluster that has not finished, with its times.

        One State API `list_tasks` call (detail, for the creation and start
        times). Pending tasks may not name their node yet, so the caller picks
        a node's tasks by actor. Feeds RDT transfer pairing (`transfers.py`).
        """
        self._check_open()
        tasks = self._list_tasks(
            [("type", "=", "ACTOR_TASK"), ("state", "!=", "FINISHED"), ("state", "!=", "FAILED")],
            detail=True, deadline=_Deadline(timeout_s))
        # A task whose creation event has not reached the State API (events are
        # batched, and may come out of order) has no creation time: it cannot be
        # aged or paired in time, so it waits for a later refresh. Its start time
        # stands in when only that arrived.
        return [_actor_task(task) for task in tasks
                if task.creation_time_ms or task.start_time_ms]

    def actor_states(self, actor_ids: Iterable[str], timeout_s: float = 2.0) -> dict[str, str]:
        """actor id -> GCS actor state ("ALIVE", "DEAD", ...); unknown actors are left out."""
        self._check_open()
        deadline = _Deadline(timeout_s)
        states = {}
        for actor_id in sorted(set(actor_ids)):
            request = gcs_service_pb2.GetAllActorInfoRequest(
                filters=gcs_service_pb2.GetAllActorInfoRequest.Filters(
                    actor_id=bytes.fromhex(actor_id)))
            reply = self._gcs.call(gcs_service_pb2_grpc.ActorInfoGcsServiceStub,
                                   "GetAllActorInfo", request, deadline.remaining())
            for actor in reply.actor_table_data:
                states[actor_id] = gcs_pb2.ActorTableData.ActorState.Name(actor.state)
        return states

    def _list_tasks(self, filters: list[tuple[str, str, str]], detail: bool,
                    deadline: _Deadline) -> list[TaskState]:
        url, client = self._state_api(deadline)
        options = ListApiOptions(limit=_TASK_LIST_LIMIT,
                                 timeout=max(1, round(deadline.remaining())),
                                 detail=detail, filters=filters)
        try:
            return client.list(StateResource.TASKS, options, raise_on_missing_output=False)
        except Exception as error:  # requests, JSON and State API errors alike
            with self._lock:
                self._state_client = None
            if isinstance(error, AuthenticationError):
                _forget_token()
            raise RaySourceError(f"State API at {url} failed to list tasks: {error}") from error

    def close(self) -> None:
        """Close the connections; later calls raise `RaySourceError`."""
        self._closed = True
        self._gcs.close()
        self._raylet.close()
        with self._lock:
            self._state_client = None

    def __enter__(self) -> RaySources:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RaySourceError("RaySources is closed")

    def _names_of(self, actor_ids: set[str], deadline: _Deadline) -> dict[str, tuple[str, str]]:
        """actor id -> (class name, actor name), asking the GCS for unknown ones."""
        with self._lock:
            known = {a: n for a, n in self._actor_names.items() if a in actor_ids}
        for actor_id in sorted(actor_ids - known.keys()):
            try:
                known[actor_id] = self._lookup_actor(actor_id, deadline.remaining())
            except RaySourceError as error:
                log.warning("actor names left out this time: %s", error)
                break
        with self._lock:
            # Keep only actors still on the node, so the cache cannot grow.
            self._actor_names = dict(known)
        return known

    def _lookup_actor(self, actor_id: str, timeout_s: float) -> tuple[str, str]:
        # One lookup per new actor (then cached) rather than the whole actor
        # table: it finds actors still in __init__ (not yet ALIVE) too, and its
        # cost does not grow with the cluster.
        request = gcs_service_pb2.GetAllActorInfoRequest(
            filters=gcs_service_pb2.GetAllActorInfoRequest.Filters(actor_id=bytes.fromhex(actor_id))
        )
        reply = self._gcs.call(
            gcs_service_pb2_grpc.ActorInfoGcsServiceStub, "GetAllActorInfo", request, timeout_s
        )
        for actor in reply.actor_table_data:
            return actor.class_name, actor.name
        return "", ""

    def _state_api(self, deadline: _Deadline) -> tuple[str, _BoundStateApiClient]:
        """(URL, State API client) for the dashboard whose address the GCS holds."""
        with self._lock:
            if self._state_client is not None:
                return self._state_client
        url = f"http://{self._dashboard_address(deadline.remaining())}"
        client = (url, _BoundStateApiClient(url))
        with self._lock:
            self._state_client = client
        return client

    def _dashboard_address(self, timeout_s: float) -> str:
        request = gcs_service_pb2.InternalKVGetRequest(
            key=ray_constants.DASHBOARD_ADDRESS.encode(),
            namespace=ray_constants.KV_NAMESPACE_DASHBOARD,
        )
        reply = self._gcs.call(
            gcs_service_pb2_grpc.InternalKVGcsServiceStub, "InternalKVGet", request, timeout_s
        )
        if reply.status.code != 0 or not reply.value:
            raise RaySourceError(
                f"the GCS at {self._gcs.address} knows no dashboard; the State API needs "
                "the head started with --include-dashboard=true"
            )
        return reply.value.decode()


class _BoundStateApiClient(StateApiClient):
    """`StateApiClient` bound to one dashboard URL.

    `StateApiClient.__init__` lets RAY_API_SERVER_ADDRESS / RAY_ADDRESS override
    the address and resolves it through the GCS with 20 untimed retries. The
    agent already knows the URL, so only the base `SubmissionClient` set-up runs
    (it adds the `authorization: Bearer <token>` header when token auth is on).
    """

    def __init__(self, url: str) -> None:
        SubmissionClient.__init__(
            self,
            address=url,
            create_cluster_if_needed=False,
            headers={"Content-Type": "application/json"},
        )
