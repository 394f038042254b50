"""The Ray cluster's GCS as the cluster tools use it: the node table and the key-value store.

Like exporter/attribution/ray_sources.py, this never calls `ray.init()` nor
imports Ray: it talks gRPC to the GCS with Ray's token and Ray's generated
messages, every call with a timeout, and turns every failure into
`RaySourceError`. (`ray._raylet.GcsClient` works with the token too, but its
constructor blocks for 40 s when the GCS cannot be reached.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..attribution.ray_addresses import explicit_address
from ..attribution.ray_errors import RaySourceError
from ..attribution.ray_generated import generated
from ..attribution.ray_grpc import GrpcEndpoint, rpc_method
from ..attribution.ray_sources import RaySources
from ..attribution.ray_token import enable_if_token_available


@dataclass(frozen=True)
class ClusterNode:
    """One node of the cluster as the GCS lists it."""

    node_id: str
    node_ip: str
    hostname: str
    is_head: bool
    alive: bool
    session_dir: str


def resolve_gcs_address(address: str | None) -> str:
    """The cluster's GCS address: `address`, else RAY_ADDRESS, else the Ray node on this host.

    Raises `RayNotFound` when none is given and no Ray node runs here, or the
    address is malformed; `RaySourceError` when the local node's GCS does not answer.
    """
    explicit = explicit_address(address)
    if explicit is not None:
        return explicit
    with RaySources.discover() as local:
        return local.node.gcs_address


class ClusterGcs:
    """Node table and key-value store of one cluster's GCS. Safe to share between threads."""

    def __init__(self, address: str, timeout_s: float = 5.0) -> None:
        """`address` is host:port (see `resolve_gcs_address`); nothing connects until a call."""
        enable_if_token_available()
        self.address = address
        self.timeout_s = timeout_s
        self._endpoint = GrpcEndpoint(address, "GCS")
        self._messages = generated("gcs_service_pb2")

    def nodes(self, alive_only: bool = False) -> list[ClusterNode]:
        """The nodes the GCS knows (dead ones too unless `alive_only`), head first."""
        alive = generated("gcs_pb2").GcsNodeInfo.GcsNodeState.ALIVE
        request = self._messages.GetAllNodeInfoRequest()
        if alive_only:
            request.state_filter = alive
        reply = self._endpoint.call(
            rpc_method("gcs_service_pb2", "NodeInfoGcsService", "GetAllNodeInfo"), request,
            self.timeout_s)
        nodes = [
            ClusterNode(node_id=n.node_id.hex(), node_ip=n.node_manager_address,
                        hostname=n.node_manager_hostname, is_head=n.is_head_node,
                        alive=n.state == alive, session_dir=n.session_dir)
            for n in reply.node_info_list
        ]
        return sorted(nodes, key=lambda n: (not n.is_head, not n.alive, n.node_id))

    def head(self) -> ClusterNode:
        """The alive head node; `RaySourceError` if the GCS lists none."""
        for node in self.nodes(alive_only=True):
            if node.is_head:
                return node
        raise RaySourceError(f"the GCS at {self.address} lists no alive head node")

    def _kv(self, method: str, request: Any) -> Any:
        """One call of the GCS's internal KV service."""
        return self._endpoint.call(rpc_method("gcs_service_pb2", "InternalKVGcsService", method),
                                   request, self.timeout_s)

    def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        """Set `key` to `value`, replacing what was there."""
        request = self._messages.InternalKVPutRequest(
            namespace=namespace.encode(), key=key.encode(), value=value, overwrite=True)
        self._check(self._kv("InternalKVPut", request), "put")

    def kv_get(self, namespace: str, key: str) -> bytes | None:
        """The value of `key`, or None when it is not set."""
        request = self._messages.InternalKVGetRequest(namespace=namespace.encode(),
                                                      key=key.encode())
        reply = self._kv("InternalKVGet", request)
        return reply.value if reply.status.code == 0 else None

    def kv_delete(self, namespace: str, key: str) -> bool:
        """Delete `key`; True when it existed."""
        request = self._messages.InternalKVDelRequest(namespace=namespace.encode(),
                                                      key=key.encode())
        reply = self._kv("InternalKVDel", request)
        self._check(reply, "delete")
        return reply.deleted_num > 0

    def kv_items(self, namespace: str, prefix: str) -> dict[str, bytes]:
        """Every key starting with `prefix` and its value."""
        keys_request = self._messages.InternalKVKeysRequest(namespace=namespace.encode(),
                                                            prefix=prefix.encode())
        keys = self._kv("InternalKVKeys", keys_request)
        self._check(keys, "list keys")
        if not keys.results:
            return {}
        request = self._messages.InternalKVMultiGetRequest(namespace=namespace.encode(),
                                                           keys=list(keys.results))
        reply = self._kv("InternalKVMultiGet", request)
        self._check(reply, "read")
        return {entry.key.decode(errors="replace"): entry.value for entry in reply.results}

    def close(self) -> None:
        """Drop the connection; a later call connects again."""
        self._endpoint.close()

    def __enter__(self) -> ClusterGcs:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check(self, reply, what: str) -> None:
        if reply.status.code != 0:
            raise RaySourceError(f"GCS at {self.address}: key-value {what} failed: "
                                 f"{reply.status.message or reply.status.code}")
