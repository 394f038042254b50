"""HTTP GETs over a connection kept open between calls, one per thread and server.

The pairing agent asks the head's State API every refresh; a new connection and
urllib's handler chain each time cost more of the agent's CPU than the answer's
parsing. A kept connection the server has closed since (its keep-alive timeout,
a restarted dashboard) is replaced and the request sent once more; any other
failure is the caller's. A server the environment routes through a proxy
(`http_proxy` and `no_proxy`, as urllib and Ray's `requests` read them) is asked
through urllib, one connection per request, as before.
"""

from __future__ import annotations

import http.client
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from functools import lru_cache
from urllib.parse import urlsplit


class HttpStatusError(Exception):
    """A reply with a status other than 2xx: its `status` and the start of its body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


class _Connections(threading.local):
    def __init__(self) -> None:
        self.by_server: dict[str, http.client.HTTPConnection] = {}


_connections = _Connections()


@lru_cache(maxsize=64)
def _proxied(server: str) -> bool:
    """Whether urllib would send a request to `server` (host:port) through a proxy."""
    return "http" in urllib.request.getproxies() and not urllib.request.proxy_bypass(server)


def get(url: str, headers: Mapping[str, str], timeout_s: float) -> bytes:
    """The body of `GET url` (an http:// URL not proxied over a kept connection, any other
    through urllib); `HttpStatusError` for a status other than 2xx, `OSError` or
    `http.client.HTTPException` when the server cannot be asked."""
    parts = urlsplit(url)
    if parts.scheme != "http" or _proxied(parts.netloc):
        return _get_through_urllib(url, headers, timeout_s)
    path = f"{parts.path or '/'}?{parts.query}" if parts.query else (parts.path or "/")
    kept = _connections.by_server.get(parts.netloc)
    if kept is not None:
        try:
            return _exchange(parts.netloc, kept, path, headers, timeout_s)
        except ConnectionError:  # closed by the server since the last request: ask afresh
            pass
    connection = http.client.HTTPConnection(parts.netloc, timeout=timeout_s)
    return _exchange(parts.netloc, connection, path, headers, timeout_s)


def _exchange(server: str, connection: http.client.HTTPConnection, path: str,
              headers: Mapping[str, str], timeout_s: float) -> bytes:
    """One request and its whole reply; the connection is kept for the next only after a
    complete reply the server did not say it would close."""
    _connections.by_server.pop(server, None)
    connection.timeout = timeout_s
    if connection.sock is not None:
        connection.sock.settimeout(timeout_s)
    try:
        connection.request("GET", path, headers=dict(headers))
        response = connection.getresponse()
        body = response.read()
    except BaseException:
        connection.close()
        raise
    if response.will_close:
        connection.close()
    else:
        _connections.by_server[server] = connection
    if not 200 <= response.status < 300:
        raise HttpStatusError(response.status, body)
    return body


def _get_through_urllib(url: str, headers: Mapping[str, str], timeout_s: float) -> bytes:
    request = urllib.request.Request(url, headers=dict(headers))
    opener = urllib.request.build_opener()  # reads the proxy settings now, not at first use
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return response.read()
    except urllib.error.HTTPError as error:
        raise HttpStatusError(error.code, error.read()) from error

