"""The agent's own unary gRPC client against a real grpcio server (the C++ core Ray's
servers run on): answers, statuses, deadlines, large answers, a restarted server,
concurrent calls and mutual TLS, through `GrpcEndpoint` as the attribution calls it."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest
from ray.core.generated import node_manager_pb2

from ray_accel.exporter.attribution.grpc_unary import RpcFailure, UnaryConnection
from ray_accel.exporter.attribution.ray_errors import RaySourceError
from ray_accel.exporter.attribution.ray_grpc import GrpcEndpoint, rpc_method
from tests.support.tls_files import make_certificates, make_client_certificate

_STATS = rpc_method("node_manager_pb2", "NodeManagerService", "GetNodeStats")
_REQUEST = node_manager_pb2.GetNodeStatsRequest(include_memory_info=False)


class _NodeManager:
    """A NodeManagerService whose GetNodeStats does what the test sets in `behaviour`."""

    def __init__(self) -> None:
        self.behaviour = "answer"
        self.workers = 3
        self.seen_metadata: list[dict[str, str]] = []
        self.barrier: threading.Barrier | None = None
        self.released = threading.Event()  # what a hanging call waits for
        self.time_left: list[float | None] = []

    def get_node_stats(self, request, context):
        self.seen_metadata.append(dict(context.invocation_metadata()))
        self.time_left.append(context.time_remaining())
        if self.behaviour == "refuse":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "Invalid token: 100% wrong")
        if self.behaviour == "hang":
            self.released.wait(timeout=30)
        if self.barrier is not None:
            self.barrier.wait(timeout=5)
        reply = node_manager_pb2.GetNodeStatsReply(num_workers=self.workers)
        for pid in range(self.workers):
            reply.core_workers_stats.add(pid=pid + 1, ip_address="x" * 1000)
        return reply


def _serve(node_manager: _NodeManager, port: int = 0, credentials=None) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.unary_unary_rpc_method_handler(
        node_manager.get_node_stats,
        request_deserializer=node_manager_pb2.GetNodeStatsRequest.FromString,
        response_serializer=node_manager_pb2.GetNodeStatsReply.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "ray.rpc.NodeManagerService", {"GetNodeStats": handler}),))
    address = f"127.0.0.1:{port}"
    bound = (server.add_secure_port(address, credentials) if credentials
             else server.add_insecure_port(address))
    server.start()
    return server, bound


@pytest.fixture
def node_manager(monkeypatch):
    for name in ("RAY_USE_TLS", "RAY_AUTH_TOKEN_PATH", "RAY_grpc_enable_http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "the-cluster-token")
    node_manager = _NodeManager()
    node_manager.server, node_manager.port = _serve(node_manager)
    yield node_manager
    node_manager.released.set()
    node_manager.server.stop(0)


def test_an_answer_comes_back_with_the_token_sent(node_manager):
    endpoint = GrpcEndpoint(f"127.0.0.1:{node_manager.port}", "raylet")
    reply = endpoint.call(_STATS, _REQUEST, timeout_s=5)
    assert reply.num_workers == 3 and [w.pid for w in reply.core_workers_stats] == [1, 2, 3]
    again = endpoint.call(_STATS, _REQUEST, timeout_s=5)
    assert again == reply
    assert [m.get("authorization") for m in node_manager.seen_metadata] == [
        "Bearer the-cluster-token"] * 2
    endpoint.close()


def test_a_status_is_told_in_words_and_the_next_call_connects_again(node_manager):
    endpoint = GrpcEndpoint(f"127.0.0.1:{node_manager.port}", "raylet")
    node_manager.behaviour = "refuse"
    with pytest.raises(RaySourceError) as refused:
        endpoint.call(_STATS, _REQUEST, timeout_s=5)
    message = str(refused.value)
    assert "GetNodeStats failed: rejected our authentication token" in message
    assert "Invalid token: 100% wrong" in message  # grpc-message is percent-decoded
    node_manager.behaviour = "answer"
    assert endpoint.call(_STATS, _REQUEST, timeout_s=5).num_workers == 3


def test_a_call_ends_at_its_deadline(node_manager):
    endpoint = GrpcEndpoint(f"127.0.0.1:{node_manager.port}", "raylet")
    node_manager.behaviour = "hang"
    with pytest.raises(RaySourceError, match=r"no answer within 0\.3 s"):
        endpoint.call(_STATS, _REQUEST, timeout_s=0.3)  # the server holds it until released
    assert 0 < node_manager.time_left[-1] <= 0.3  # the deadline was sent (grpc-timeout)
    node_manager.behaviour = "answer"
    assert endpoint.call(_STATS, _REQUEST, timeout_s=5).num_workers == 3


def test_an_answer_larger_than_the_flow_control_windows_arrives_whole(node_manager):
    node_manager.workers = 6000  # about 6 MB: many frames, window updates on the way
    connection = UnaryConnection(f"127.0.0.1:{node_manager.port}",
                                 max_message_bytes=64 * 1024 * 1024)
    answer = connection.call(_STATS.path, _REQUEST.SerializeToString(), 10)
    reply = node_manager_pb2.GetNodeStatsReply.FromString(answer)
    assert len(reply.core_workers_stats) == 6000 and reply.core_workers_stats[-1].pid == 6000
    small = UnaryConnection(f"127.0.0.1:{node_manager.port}", max_message_bytes=1024 * 1024)
    with pytest.raises(RpcFailure) as too_large:
        small.call(_STATS.path, _REQUEST.SerializeToString(), 10)
    assert too_large.value.code == "RESOURCE_EXHAUSTED"


def test_a_restarted_server_is_reached_on_the_next_call(node_manager):
    endpoint = GrpcEndpoint(f"127.0.0.1:{node_manager.port}", "raylet")
    assert endpoint.call(_STATS, _REQUEST, timeout_s=5).num_workers == 3
    again = _NodeManager()
    again.workers = 5
    node_manager.server.stop(0).wait()  # gone with the connection open; another takes its port
    server, _ = _serve(again, node_manager.port)
    try:
        assert endpoint.call(_STATS, _REQUEST, timeout_s=5).num_workers == 5
    finally:
        server.stop(0)


def test_a_server_that_is_not_there_is_unreachable():
    endpoint = GrpcEndpoint("127.0.0.1:1", "raylet")
    with pytest.raises(RaySourceError) as unreachable:
        endpoint.call(_STATS, _REQUEST, timeout_s=2)
    assert str(unreachable.value).startswith(
        "raylet at 127.0.0.1:1: GetNodeStats failed: unreachable (")


def test_calls_from_two_threads_run_side_by_side(node_manager):
    endpoint = GrpcEndpoint(f"127.0.0.1:{node_manager.port}", "raylet")
    node_manager.barrier = threading.Barrier(2)  # each answer waits for the other call
    with futures.ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda _: endpoint.call(_STATS, _REQUEST, timeout_s=8), (1, 2)))
    assert [r.num_workers for r in replies] == [3, 3]


def test_mutual_tls_as_ray_configures_it(tmp_path, monkeypatch):
    files = make_certificates(tmp_path)
    client_cert, client_key = make_client_certificate(tmp_path, files["ca"], files["ca_key"])
    credentials = grpc.ssl_server_credentials(
        [(files["key"].read_bytes(), files["cert"].read_bytes())],
        root_certificates=files["ca"].read_bytes(), require_client_auth=True)
    node_manager = _NodeManager()
    server, port = _serve(node_manager, credentials=credentials)
    try:
        monkeypatch.setenv("RAY_USE_TLS", "1")
        monkeypatch.setenv("RAY_TLS_CA_CERT", str(files["ca"]))
        monkeypatch.setenv("RAY_TLS_SERVER_CERT", str(client_cert))
        monkeypatch.setenv("RAY_TLS_SERVER_KEY", str(client_key))
        endpoint = GrpcEndpoint(f"127.0.0.1:{port}", "raylet")
        assert endpoint.call(_STATS, _REQUEST, timeout_s=5).num_workers == 3
        monkeypatch.delenv("RAY_USE_TLS")  # plain HTTP/2 to a TLS port gets no answer
        with pytest.raises(RaySourceError, match="GetNodeStats failed"):
            GrpcEndpoint(f"127.0.0.1:{port}", "raylet").call(_STATS, _REQUEST, timeout_s=2)
    finally:
        server.stop(0)


def test_tls_without_its_files_is_refused_before_connecting(monkeypatch):
    monkeypatch.setenv("RAY_USE_TLS", "1")
    monkeypatch.delenv("RAY_TLS_CA_CERT", raising=False)
    with pytest.raises(RaySourceError, match="RAY_TLS_CA_CERT must be set"):
        GrpcEndpoint("127.0.0.1:1", "raylet").call(_STATS, _REQUEST, timeout_s=1)
