"""Requests from ray-accel's own tools to agents, carrying the cluster token.

`ray-accel status`, `topo --address`, `transfers` and the dashboard's collector
read agents that may require Ray's cluster token (exposure.py) and may serve
TLS; they present the token Ray's own clients would (web_auth.cluster_token)
and verify an https agent against the system's CAs plus RAY_ACCEL_TLS_CA_FILE.
"""

from __future__ import annotations

import functools
import os
import ssl
import urllib.request
from typing import IO

from .web_auth import auth_headers, cluster_token

CA_FILE_ENV = "RAY_ACCEL_TLS_CA_FILE"


@functools.cache
def client_token() -> str | None:
    """The token this process presents to agents (Ray's cluster token when auth is on)."""
    return cluster_token()


def client_ssl_context() -> ssl.SSLContext:
    """How https agents are verified: the system's CAs, plus the file in RAY_ACCEL_TLS_CA_FILE."""
    return ssl.create_default_context(cafile=os.environ.get(CA_FILE_ENV) or None)


def open_agent(url: str, timeout_s: float) -> IO[bytes]:
    """GET `url` from an agent with the token; raises like urllib.request.urlopen."""
    request = urllib.request.Request(url, headers=auth_headers(client_token()))
    context = client_ssl_context() if url.startswith("https:") else None
    return urllib.request.urlopen(request, timeout=timeout_s, context=context)
