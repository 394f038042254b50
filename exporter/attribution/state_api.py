"""Ray's State API over plain HTTP: the task list the head's dashboard serves.

`GET <dashboard>/api/v0/tasks` with the query Ray's `StateApiClient.list`
sends (limit, timeout, detail, exclude_driver, filter_keys/predicates/values),
the token as `authorization: Bearer <token>` in token mode, and the same reply
(`{"result": true, "data": {"result": {"result": [rows...]}}}`). The server
is given 80 % of the call's time, as Ray's client does, so that it answers
(with partial results) before the client gives up. Listings go over a connection
kept open between them (kept_http.py).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from . import kept_http
from .ray_errors import RaySourceError
from .ray_token import current_token

_SERVER_SHARE_OF_TIMEOUT = 0.8
_ERROR_TEXT_CHARS = 200


def task_query(filters: Sequence[tuple[str, str, str]], limit: int, timeout_s: float,
               detail: bool) -> str:
    """The query string of one task listing."""
    server_timeout_s = max(1, int(max(1, round(timeout_s)) * _SERVER_SHARE_OF_TIMEOUT))
    return _encoded_query(tuple(filters), limit, server_timeout_s, detail)


@lru_cache(maxsize=32)  # the pairing agent's listing asks the same every refresh
def _encoded_query(filters: tuple[tuple[str, str, str], ...], limit: int,
                   server_timeout_s: int, detail: bool) -> str:
    params: list[tuple[str, str]] = [
        ("limit", str(limit)), ("timeout", str(server_timeout_s)),
        ("detail", str(detail)), ("exclude_driver", "True"),
        ("server_timeout_multiplier", str(_SERVER_SHARE_OF_TIMEOUT)),
    ]
    for key, predicate, value in filters:
        params += [("filter_keys", key), ("filter_predicates", predicate),
                   ("filter_values", value)]
    return urllib.parse.urlencode(params)


def list_tasks(url: str, filters: Sequence[tuple[str, str, str]], limit: int,
               timeout_s: float, detail: bool) -> list[dict[str, Any]]:
    """The task rows the State API at `url` returns; any failure is a `RaySourceError`."""
    try:
        body = kept_http.get(f"{url}/api/v0/tasks?{task_query(filters, limit, timeout_s, detail)}",
                             {"Content-Type": "application/json", **_auth_header()},
                             timeout_s=max(1.0, timeout_s))
    except kept_http.HttpStatusError as error:
        text = error.body[:_ERROR_TEXT_CHARS].decode(errors="replace")
        if error.status in (401, 403):
            raise RaySourceError(f"State API at {url} refused our token (HTTP {error.status}: "
                                 f"{text}); give the agent the cluster's token through "
                                 "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
                                 ) from error
        raise RaySourceError(f"State API at {url} failed to list tasks: HTTP {error.status}: "
                             f"{text}") from error
    except (OSError, ValueError, http.client.HTTPException) as error:  # unreachable, timed out
        raise RaySourceError(f"State API at {url} failed to list tasks: {error}") from error
    return _rows(url, body)


def _rows(url: str, body: bytes) -> list[dict[str, Any]]:
    try:
        reply = json.loads(body)
        if reply.get("result") is False:
            raise RaySourceError(f"State API at {url} failed to list tasks: "
                                 f"{reply.get('msg', 'internal error')}")
        rows = reply["data"]["result"]["result"]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise RaySourceError(f"State API at {url} sent a malformed task list: "
                             f"{body[:_ERROR_TEXT_CHARS]!r}") from error
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise RaySourceError(f"State API at {url} sent task rows that are not objects")
    return rows


def _auth_header() -> dict[str, str]:
    token = current_token()
    return {"authorization": f"Bearer {token}"} if token else {}
