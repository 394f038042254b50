"""Ray addresses as Ray 2.60 writes and reads them, without importing Ray.

host:port with IPv6 hosts in brackets; a loopback host given by a user stands
for this node's IP (`canonical`); the Ray temp dir honours RAY_TMPDIR, then
TMPDIR, then /tmp; the last `ray start` records its GCS address in
<temp dir>/ray/ray_current_cluster.
"""

from __future__ import annotations

import os
import socket

from .ray_errors import RayNotFound

ADDRESS_VARIABLE = "RAY_ADDRESS"
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Where a UDP socket is "connected" to learn the address this host routes from;
# nothing is sent.
_ROUTE_PROBE = ("8.8.8.8", 53)
_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def parse_address(address: str) -> tuple[str, str] | None:
    """(host, port) of host:port or [v6]:port; None when it is not one (as Ray splits it)."""
    if address.count(":") == 1:
        host, _, port = address.partition(":")
        return host, port
    if address.startswith("[") and "]:" in address:
        host, _, port = address[1:].partition("]:")
        return None if ":" in port else (host, port)
    return None


def build_address(host: str, port: int | str) -> str:
    """host:port, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def port_of(address: str) -> str:
    parsed = parse_address(address)
    return parsed[1] if parsed else ""


def node_ip_address() -> str:
    """This node's IP as Ray picks it: the address this host reaches others from.

    Loopback when it has no route, or when RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is
    off (Ray's switch that keeps a cluster on one machine).
    """
    if os.environ.get(_CLUSTER_SWITCH, "1").lower() not in ("true", "1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_ROUTE_PROBE)
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def canonical(address: str) -> str:
    """host:port with a loopback host replaced by this node's IP, as Ray does."""
    if "://" in address:
        raise RayNotFound(
            f"{address!r} is not a GCS address; give the cluster's host:port (e.g. head:6379)"
        )
    parsed = parse_address(address)
    if parsed is None or not parsed[0]:
        raise RayNotFound(f"invalid Ray address {address!r}: Invalid address format: {address}")
    host, port = parsed
    return build_address(node_ip_address() if host in _LOOPBACK_HOSTS else host, port)


def explicit_address(address: str | None) -> str | None:
    """The address given by the caller or RAY_ADDRESS, canonicalised the way Ray does."""
    if address in (None, "", "auto"):
        address = os.environ.get(ADDRESS_VARIABLE) or None
    if address in (None, "auto"):
        return None
    return canonical(address)


def default_temp_dir() -> str:
    """Ray's temp dir: <RAY_TMPDIR or TMPDIR or /tmp>/ray."""
    # A variable that is set wins even when empty, as in Ray.
    system = os.environ.get("RAY_TMPDIR", os.environ.get("TMPDIR", "/tmp"))
    return os.path.join(system, "ray")


def recorded_address(temp_dir: str) -> str | None:
    """The GCS address the last `ray start` recorded under `temp_dir`, if any."""
    try:
        with open(os.path.join(temp_dir, "ray_current_cluster")) as recorded:
            return recorded.read().strip()
    except FileNotFoundError:
        return None
