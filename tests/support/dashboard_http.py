"""Asking a dashboard over HTTP in tests: a GET with the cluster's token, a wait for a condition."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

# The frontend's sources and its browser scripts (e2e/).
FRONTEND = Path(__file__).resolve().parent.parent.parent / "frontend"


def get(url: str, token: str | None = None, timeout: float = 10) -> tuple[int, bytes]:
    """(status, body) of a GET, with the token as a bearer when given."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_json(url: str, token: str, predicate, timeout: float = 90) -> dict:
    """The JSON at `url` once `predicate` holds for it."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        status, body = get(url, token)
        if status == 200:
            last = json.loads(body)
            if predicate(last):
                return last
        time.sleep(0.5)
    raise AssertionError(f"{url}: condition not met; last {last}")
