"""The agent's read-only view of the Ray node it runs on.

The agent is a plain process, not a Ray driver: it never calls `ray.init()`
(that would register a job), and it does not import Ray either (most of Ray
is about 50 MB resident for a few calls). It reads, on its own cadence:

- the node itself (id, IP, raylet address, labels, session dir) from the GCS,
  and the raylet's visible-device variables from `/proc/<raylet pid>/environ`
  (`raylet_discovery.py`);
- the workers on the node and the resource slots each holds, from the raylet's
  `NodeManagerService.GetNodeStats`, plus actor class and name from the GCS,
  over gRPC with Ray's generated messages (`ray_grpc.py`, `ray_generated.py`);
- the ids of the tasks each worker runs, from the worker itself
  (`CoreWorkerService.GetCoreWorkerStats`), and what a task is (name, times)
  from the State API served by the head's dashboard, one task id at a time
  (`state_api.py`); the cluster's unfinished actor tasks, for transfer pairing,
  from the State API too.

Token authentication works as with Ray's own clients (`ray_token.py`). Every
call takes a timeout and raises `RaySourceError` instead of hanging or leaking
gRPC/HTTP errors. Connections are made lazily and dropped on any failure, so a
GCS, raylet or dashboard that comes back works again on the next call.
Verified against Ray 2.60; see docs/ray-internals.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any

from .ray_addresses import build_address, canonical, explicit_address
from .ray_errors import RayNotFound, RaySourceError
from .ray_generated import generated
from .ray_grpc import GrpcEndpoint, rpc_method
from .ray_records import (
    LocalRayNode,
    RayWorkerInfo,
    ResourceGrant,
    RunningTask,
    WorkerRecords,
    actor_task,
)
from .ray_token import enable_if_token_available
from .raylet_discovery import (
    VISIBLE_DEVICE_VARIABLES,
    choose_node,
    detected_address,
    local_raylets,
    visible_devices,
)
from .state_api import list_tasks
from .transfers import ActorTask

__all__ = ["VISIBLE_DEVICE_VARIABLES", "LocalRayNode", "RayNotFound", "RaySourceError",
           "RaySources", "RayWorkerInfo", "ResourceGrant", "RunningTask"]

log = logging.getLogger(__name__)

_TASK_LIST_LIMIT = 10_000
# Where the head's dashboard records its address in the GCS's key-value store.
_DASHBOARD_ADDRESS_KEY = b"dashboard"
_DASHBOARD_NAMESPACE = b"dashboard"


class _Deadline:
    """The time left of one call's budget."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(self._end - time.monotonic(), 0.0)


def _enable_token_auth() -> None:
    """Send the cluster's token when one is configured for this process.

    Like `ray.init(address="auto")`: with RAY_AUTH_MODE unset, a token found in
    RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token turns token mode on
    for this process (it sets RAY_AUTH_MODE=token). A cluster without
    authentication ignores the token, so sending it is harmless.
    """
    enable_if_token_available()


def _alive_nodes(gcs: GrpcEndpoint, node_ids: list[str], timeout_s: float) -> list[Any]:
    """The ALIVE nodes (`GcsNodeInfo`) among `node_ids`; with no ids, checks the GCS answers."""
    gcs_pb2, service = generated("gcs_pb2"), generated("gcs_service_pb2")
    request = service.GetAllNodeInfoRequest(
        node_selectors=[
            service.GetAllNodeInfoRequest.NodeSelector(node_id=bytes.fromhex(node_id))
            for node_id in node_ids
        ],
        state_filter=gcs_pb2.GcsNodeInfo.GcsNodeState.ALIVE,
    )
    if not node_ids:
        request.limit = 1
    reply = gcs.call(rpc_method("gcs_service_pb2", "NodeInfoGcsService", "GetAllNodeInfo"),
                     request, timeout_s)
    return list(reply.node_info_list) if node_ids else []


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
        self._gcs = GrpcEndpoint(node.gcs_address, "GCS")
        self._raylet = GrpcEndpoint(node.raylet_address, "raylet")
        self._lock = threading.Lock()
        self._actor_names: dict[str, tuple[str, str]] = {}
        self._worker_records = WorkerRecords(generated("common_pb2").WorkerType.Name)
        self._worker_endpoints: dict[str, GrpcEndpoint] = {}
        self._state_url: str | None = None
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
        raylets = local_raylets()
        gcs_address = explicit_address(address) or detected_address(raylets, node_id)
        gcs = GrpcEndpoint(gcs_address, "GCS")
        try:
            nodes = _alive_nodes(gcs, [r.node_id for r in raylets], deadline.remaining())
        finally:
            gcs.close()
        by_id = {r.node_id: r for r in raylets}
        chosen = choose_node(nodes, by_id, node_id, gcs_address)
        raylet = by_id[chosen.node_id.hex()]
        return cls(
            LocalRayNode(
                node_id=chosen.node_id.hex(),
                node_ip=chosen.node_manager_address,
                raylet_address=build_address(chosen.node_manager_address, chosen.node_manager_port),
                gcs_address=gcs_address,
                session_dir=chosen.session_dir,
                labels=MappingProxyType(dict(chosen.labels)),
                visible_devices=visible_devices(raylet.pid),
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
                                gcs_address=canonical(gcs_address), session_dir="",
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
            rpc_method("node_manager_pb2", "NodeManagerService", "GetNodeStats"),
            generated("node_manager_pb2").GetNodeStatsRequest(include_memory_info=False),
            deadline.remaining(),
        )
        workers = self._worker_records.convert(reply.core_workers_stats)
        names = self._names_of({w.actor_id for _, w in workers if w.actor_id}, deadline)
        return [self._worker_records.named(key, w, names.get(w.actor_id)) for key, w in workers]

    def running_task_ids(self, worker: RayWorkerInfo, timeout_s: float = 2.0) -> tuple[str, ...]:
        """The ids of the tasks `worker` is running now, asked of the worker itself.

        One `CoreWorkerService.GetCoreWorkerStats` call (task info on, no owned
        tasks) to the worker's own gRPC server: it costs the head nothing and
        does not grow with the cluster. A reply from another worker (the port
        reused after this one exited) is refused.
        """
        self._check_open()
        if not worker.address:
            raise RaySourceError(f"worker {worker.pid} has no gRPC address")
        core_worker = generated("core_worker_pb2")
        request = core_worker.GetCoreWorkerStatsRequest(
            intended_worker_id=bytes.fromhex(worker.worker_id), include_task_info=True, limit=0)
        reply = self._worker_endpoint(worker.address).call(
            rpc_method("core_worker_pb2", "CoreWorkerService", "GetCoreWorkerStats"),
            request, timeout_s)
        answered = reply.core_worker_stats.worker_id.hex()
        if answered != worker.worker_id:
            raise RaySourceError(f"worker {worker.pid} at {worker.address}: worker {answered} "
                                 "answered instead")
        return tuple(task_id.hex() for task_id in reply.running_task_ids)

    def task_detail(self, task_id: str, timeout_s: float = 5.0) -> ActorTask | None:
        """What one task is (name, state, times), or None when the State API has no row yet.

        One State API `list_tasks` call filtered on the task id, a filter the GCS
        applies from its index, so its cost does not grow with the cluster.
        """
        self._check_open()
        rows = self._list_tasks([("task_id", "=", task_id)], detail=True,
                                deadline=_Deadline(timeout_s))
        return next((actor_task(row) for row in rows if row.get("task_id") == task_id), None)

    def state_api_url(self, timeout_s: float = 5.0) -> str:
        """The URL of the head's dashboard, whose State API the task calls ask."""
        self._check_open()
        return self._state_api(_Deadline(timeout_s))

    def forget_workers(self, kept: Iterable[str]) -> None:
        """Close the channels to workers whose addresses are not in `kept`."""
        kept = set(kept)
        with self._lock:
            gone = [a for a in self._worker_endpoints if a not in kept]
            endpoints = [self._worker_endpoints.pop(a) for a in gone]
        for endpoint in endpoints:
            endpoint.close()

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
        return [actor_task(task) for task in tasks
                if task.get("creation_time_ms") or task.get("start_time_ms")]

    def actor_states(self, actor_ids: Iterable[str], timeout_s: float = 2.0) -> dict[str, str]:
        """actor id -> GCS actor state ("ALIVE", "DEAD", ...); unknown actors are left out."""
        self._check_open()
        deadline = _Deadline(timeout_s)
        states = {}
        for actor_id in sorted(set(actor_ids)):
            state_name = generated("gcs_pb2").ActorTableData.ActorState.Name
            for actor in self._actor_info(actor_id, deadline.remaining()):
                states[actor_id] = state_name(actor.state)
        return states

    def _list_tasks(self, filters: list[tuple[str, str, str]], detail: bool,
                    deadline: _Deadline) -> list[dict[str, Any]]:
        url = self._state_api(deadline)
        try:
            return list_tasks(url, filters, _TASK_LIST_LIMIT, deadline.remaining(), detail)
        except RaySourceError:
            with self._lock:
                self._state_url = None  # ask the GCS again: the dashboard may have moved
            raise

    def close(self) -> None:
        """Close the connections; later calls raise `RaySourceError`."""
        self._closed = True
        self._gcs.close()
        self._raylet.close()
        self.forget_workers(())
        with self._lock:
            self._state_url = None

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
        for actor in self._actor_info(actor_id, timeout_s):
            return actor.class_name, actor.name
        return "", ""

    def _actor_info(self, actor_id: str, timeout_s: float) -> list[Any]:
        """The GCS's `ActorTableData` of one actor (none when it does not know it)."""
        service = generated("gcs_service_pb2")
        request = service.GetAllActorInfoRequest(
            filters=service.GetAllActorInfoRequest.Filters(actor_id=bytes.fromhex(actor_id)))
        method = rpc_method("gcs_service_pb2", "ActorInfoGcsService", "GetAllActorInfo")
        reply = self._gcs.call(method, request, timeout_s)
        return list(reply.actor_table_data)

    def _worker_endpoint(self, address: str) -> GrpcEndpoint:
        with self._lock:
            endpoint = self._worker_endpoints.get(address)
            if endpoint is None:
                endpoint = self._worker_endpoints[address] = GrpcEndpoint(address, "worker")
            return endpoint

    def _state_api(self, deadline: _Deadline) -> str:
        """The URL of the dashboard (State API) whose address the GCS holds."""
        with self._lock:
            if self._state_url is not None:
                return self._state_url
        url = f"http://{self._dashboard_address(deadline.remaining())}"
        with self._lock:
            self._state_url = url
        return url

    def _dashboard_address(self, timeout_s: float) -> str:
        request = generated("gcs_service_pb2").InternalKVGetRequest(
            key=_DASHBOARD_ADDRESS_KEY, namespace=_DASHBOARD_NAMESPACE)
        method = rpc_method("gcs_service_pb2", "InternalKVGcsService", "InternalKVGet")
        reply = self._gcs.call(method, request, timeout_s)
        if reply.status.code != 0 or not reply.value:
            raise RaySourceError(
                f"the GCS at {self._gcs.address} knows no dashboard; the State API needs "
                "the head started with --include-dashboard=true"
            )
        return reply.value.decode()
