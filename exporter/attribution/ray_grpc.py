"""gRPC to Ray's servers (GCS, raylet, workers) as Ray's own clients make it, without Ray.

Ray 2.60's `init_grpc_channel` sets keepalive from its config, uses TLS when
RAY_USE_TLS is on (certificates from RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY,
RAY_TLS_CA_CERT), goes through an HTTP proxy only with RAY_grpc_enable_http_proxy
on and, in token mode, sends `authorization: Bearer <token>` on every call.
`GrpcEndpoint` does the same with the token from `ray_token`, over the agent's own
unary client (`grpc_unary.py`) rather than grpcio, whose threads would cost the
agent more between its calls than the calls do.
"""

from __future__ import annotations

import os
import ssl
import threading
from dataclasses import dataclass
from typing import Any

from google.protobuf.message_factory import GetMessageClass

from .grpc_unary import RpcFailure, UnaryConnection
from .ray_errors import RaySourceError
from .ray_generated import generated
from .ray_token import auth_metadata

# Ray's limit for messages from its servers (GRPC_CPP_MAX_MESSAGE_SIZE); the
# default 4 MiB is too small for the node stats of a busy node.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
# Ray's config (RAY_<name> in the environment; its names are lower case) and defaults.
_PROXY_VARIABLE = "RAY_grpc_enable_http_proxy"
_KEEPALIVE_VARIABLE = "RAY_grpc_client_keepalive_time_ms"
_KEEPALIVE_TIME_DEFAULT_MS = 300_000


@dataclass(frozen=True)
class ConnectionOptions:
    """How a connection to a Ray server is made, from Ray's client settings."""

    max_message_bytes: int
    use_proxy: bool
    # A connection idle this long is replaced before its next call (Ray's clients ping
    # after this long idle, and drop a connection whose ping goes unanswered).
    idle_reconnect_s: float


def connection_options() -> ConnectionOptions:
    """The settings Ray's clients open channels with, plus the large-message limit."""
    proxy = os.environ.get(_PROXY_VARIABLE, "0").lower() in ("1", "true")
    keepalive_ms = int(os.environ.get(_KEEPALIVE_VARIABLE, _KEEPALIVE_TIME_DEFAULT_MS))
    return ConnectionOptions(MAX_MESSAGE_BYTES, proxy, keepalive_ms / 1000)


def open_connection(address: str) -> UnaryConnection:
    """A connection to one Ray server, configured as Ray's `init_grpc_channel` does."""
    options = connection_options()
    tls = _tls_context() if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true") \
        else None
    return UnaryConnection(address, tls, max_message_bytes=options.max_message_bytes,
                           idle_reconnect_s=options.idle_reconnect_s,
                           use_proxy=options.use_proxy)


def _tls_context() -> ssl.SSLContext:
    names = ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
    if any(name not in os.environ for name in names):
        raise RaySourceError("RAY_USE_TLS is on, so RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY "
                             "and RAY_TLS_CA_CERT must be set too")
    cert, key, ca = (os.environ[name] for name in names)
    try:
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        raise RaySourceError(f"cannot read Ray's TLS files: {error}") from error
    context.set_alpn_protocols(["h2"])
    return context


def describe_rpc_error(error: RpcFailure, timeout_s: float) -> str:
    """What went wrong with one call, in words an operator can act on."""
    if error.code == "UNAVAILABLE":
        return f"unreachable ({error.details})"
    if error.code == "DEADLINE_EXCEEDED":
        return f"no answer within {timeout_s:.1f} s"
    if error.code == "UNAUTHENTICATED":
        return (
            f"rejected our authentication token ({error.details}); give the agent the "
            "cluster's token through RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
        )
    return f"{error.code}: {error.details}"


@dataclass(frozen=True)
class RpcMethod:
    """One method of a Ray gRPC service: the path it is called at and its reply's type."""

    path: str
    reply_type: Any


_METHODS: dict[tuple[str, str, str], RpcMethod] = {}
_METHODS_LOCK = threading.Lock()


def rpc_method(module: str, service: str, method: str) -> RpcMethod:
    """The method `method` of `service` in Ray's generated module `module`
    ("node_manager_pb2", "NodeManagerService", "GetNodeStats")."""
    key = (module, service, method)
    with _METHODS_LOCK:
        found = _METHODS.get(key)
        if found is None:
            descriptor = generated(module).DESCRIPTOR.services_by_name[service]
            output = descriptor.methods_by_name[method].output_type
            found = _METHODS[key] = RpcMethod(f"/{descriptor.full_name}/{method}",
                                              GetMessageClass(output))
        return found


class GrpcEndpoint:
    """Connections to one Ray server, made on first use and dropped on any failure.

    A call takes an idle connection (or opens one), so calls from several threads run
    side by side; a connection that failed is closed, and the next call connects afresh.
    """

    def __init__(self, address: str, role: str) -> None:
        self.address = address
        self.role = role
        self._lock = threading.Lock()
        self._idle: list[UnaryConnection] = []
        self._closed = False

    def call(self, method: RpcMethod, request: Any, timeout_s: float) -> Any:
        """Make one unary call; any failure becomes a `RaySourceError`."""
        name = method.path.rpartition("/")[2]
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None:
            connection = open_connection(self.address)
        try:
            answer = connection.call(method.path, request.SerializeToString(), timeout_s,
                                     auth_metadata())
        except RpcFailure as error:  # the connection closed itself
            raise RaySourceError(
                f"{self.role} at {self.address}: {name} failed: "
                f"{describe_rpc_error(error, timeout_s)}"
            ) from error
        with self._lock:
            kept = not self._closed
            if kept:
                self._idle.append(connection)
        if not kept:
            connection.close()
        try:
            return method.reply_type.FromString(answer)
        except Exception as error:  # protobuf's DecodeError, or what a bad answer raises
            raise RaySourceError(f"{self.role} at {self.address}: {name} answered with "
                                 f"what is not its reply: {error}") from error

    def close(self) -> None:
        """Close the idle connections, and those in use once their calls end."""
        with self._lock:
            self._closed = True
            connections, self._idle = self._idle, []
        for connection in connections:
            connection.close()
