"""gRPC to Ray's servers (GCS, raylet) as Ray's own clients make it, without importing Ray.

Ray 2.60's `init_grpc_channel` sets keepalive from its config, uses TLS when
RAY_USE_TLS is on (certificates from RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY,
RAY_TLS_CA_CERT) and, in token mode, sends `authorization: Bearer <token>` on
every call. `RayChannelFactory` does the same with the token from `ray_token`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import grpc

from .ray_errors import RaySourceError
from .ray_token import auth_metadata

# Ray's limit for messages from its servers (GRPC_CPP_MAX_MESSAGE_SIZE); the
# default 4 MiB is too small for the node stats of a busy node.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
# Ray's config defaults for its clients' keepalive, overridable the way Ray's
# config is (RAY_<name> in the environment).
_KEEPALIVE_DEFAULTS = {"grpc_client_keepalive_time_ms": 300_000,
                       "grpc_client_keepalive_timeout_ms": 120_000}


def channel_options() -> list[tuple[str, Any]]:
    """The options Ray's clients open channels with, plus the large-message limit."""
    proxy_variable = "RAY_grpc_enable_http_proxy"  # Ray's config names are lower case
    proxy = os.environ.get(proxy_variable, "0").lower() in ("1", "true")
    keepalive = {name: int(os.environ.get(f"RAY_{name}", default))
                 for name, default in _KEEPALIVE_DEFAULTS.items()}
    return [
        ("grpc.enable_http_proxy", int(proxy)),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", keepalive["grpc_client_keepalive_time_ms"]),
        ("grpc.keepalive_timeout_ms", keepalive["grpc_client_keepalive_timeout_ms"]),
    ]


class _TokenMetadata(grpc.UnaryUnaryClientInterceptor):
    """Adds the cluster token (when token mode is on) to every unary call."""

    def intercept_unary_unary(self, continuation, client_call_details, request):
        extra = auth_metadata()
        if extra:
            metadata = [*(client_call_details.metadata or ()), *extra]
            client_call_details = _CallDetails(client_call_details, metadata)
        return continuation(client_call_details, request)


class _CallDetails(grpc.ClientCallDetails):
    """`client_call_details` with other metadata (gRPC's own details are immutable)."""

    def __init__(self, details: grpc.ClientCallDetails, metadata: list) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = getattr(details, "wait_for_ready", None)
        self.compression = getattr(details, "compression", None)


def open_channel(address: str) -> grpc.Channel:
    """A channel to one Ray server, configured as Ray's `init_grpc_channel` does."""
    options = channel_options()
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        channel = grpc.secure_channel(address, _tls_credentials(), options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    return grpc.intercept_channel(channel, _TokenMetadata())


def _tls_credentials() -> grpc.ChannelCredentials:
    names = ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
    if any(name not in os.environ for name in names):
        raise RaySourceError("RAY_USE_TLS is on, so RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY "
                             "and RAY_TLS_CA_CERT must be set too")
    try:
        chain, key, ca = (_read(os.environ[name]) for name in names)
    except OSError as error:
        raise RaySourceError(f"cannot read Ray's TLS files: {error}") from error
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=chain)


def _read(path: str) -> bytes:
    with open(path, "rb") as data:
        return data.read()


def _rpc_code(error: grpc.RpcError) -> grpc.StatusCode | None:
    # Errors of completed calls are also `grpc.Call`s that carry the status.
    return error.code() if isinstance(error, grpc.Call) else None


def describe_rpc_error(error: grpc.RpcError, timeout_s: float) -> str:
    """What went wrong with one call, in words an operator can act on."""
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


class GrpcEndpoint:
    """A gRPC channel to one Ray server, made on first use and dropped on any failure.

    Dropping the channel after a failure means the next call connects afresh
    instead of waiting out gRPC's reconnect backoff (up to two minutes). Stubs are
    made once per channel: a stub builds a callable for every method of its service.
    """

    def __init__(self, address: str, role: str) -> None:
        self.address = address
        self.role = role
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stubs: dict[Callable[[grpc.Channel], Any], Any] = {}

    def call(self, stub_class: Callable[[grpc.Channel], Any], method: str, request: Any,
             timeout_s: float) -> Any:
        """Make one unary call; any failure becomes a `RaySourceError`."""
        channel, stub = self._connected(stub_class)
        try:
            return getattr(stub, method)(request, timeout=timeout_s)
        except grpc.RpcError as error:
            self._drop(channel)
            raise RaySourceError(
                f"{self.role} at {self.address}: {method} failed: "
                f"{describe_rpc_error(error, timeout_s)}"
            ) from error

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
            self._stubs.clear()
        if channel is not None:
            channel.close()

    def _connected(self, stub_class: Callable[[grpc.Channel], Any]) -> tuple[grpc.Channel, Any]:
        """The channel, opened if need be, and its stub of `stub_class`."""
        with self._lock:
            if self._channel is None:
                self._channel = open_channel(self.address)
                self._stubs.clear()
            stub = self._stubs.get(stub_class)
            if stub is None:
                stub = self._stubs[stub_class] = stub_class(self._channel)
            return self._channel, stub

    def _drop(self, channel: grpc.Channel) -> None:
        with self._lock:
            if self._channel is channel:
                self._channel = None
                self._stubs.clear()
        channel.close()
