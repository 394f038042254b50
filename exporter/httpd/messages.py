"""Requests and responses of the agent's HTTP/1.1 server (exporter/httpd/)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

JSON = "application/json"
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Statuses whose responses never carry content (RFC 9110 6.4.1).
NO_CONTENT = frozenset({204, 304})


class Headers(Mapping[str, str]):
    """Request header fields by case-insensitive name; repeated fields joined (RFC 9110 5.3)."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self._fields: dict[str, str] = {}
        for name, value in fields:
            key = name.lower()
            if key in self._fields:
                joiner = "; " if key == "cookie" else ", "
                self._fields[key] = f"{self._fields[key]}{joiner}{value}"
            else:
                self._fields[key] = value

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


@dataclass(frozen=True)
class Request:
    """One parsed request: method, percent-decoded path, query values, headers."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Headers
    version: str  # "HTTP/1.0" or "HTTP/1.1"
    peer: str = "?"

    def param(self, name: str, default: str | None = None) -> str | None:
        """The first value of query parameter `name`, else `default`."""
        values = self.query.get(name)
        return values[0] if values else default

    def params(self, name: str) -> list[str]:
        """Every value of query parameter `name`, in order (`name[]=a&name[]=b`)."""
        return list(self.query.get(name, ()))

    @property
    def cookies(self) -> dict[str, str]:
        """The Cookie header's name=value pairs (RFC 6265 5.4)."""
        found: dict[str, str] = {}
        for pair in self.headers.get("Cookie", "").split(";"):
            name, sep, value = pair.strip().partition("=")
            if sep and name and name not in found:
                found[name] = value.strip().strip('"')
        return found

    @property
    def keep_alive(self) -> bool:
        """Whether the connection stays open after this request's response."""
        if self.version != "HTTP/1.1":
            return False
        options = self.headers.get("Connection", "").lower().split(",")
        return "close" not in (option.strip() for option in options)


@dataclass
class Response:
    """A whole response: status, body and header fields (Content-Length is added)."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def head(self, close: bool, length: int | None = None) -> bytes:
        """The status line and header section, ending in the empty line."""
        lines = [f"HTTP/1.1 {self.status} {_phrase(self.status)}", f"Date: {http_date()}"]
        if self.content_type is not None:
            lines.append(f"Content-Type: {self.content_type}")
        lines.extend(f"{name}: {value}" for name, value in self.headers.items())
        if self.status not in NO_CONTENT:
            lines.append(f"Content-Length: {len(self.body) if length is None else length}")
        if close:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def as_aiohttp(self) -> Any:
        """The same response as an `aiohttp.web.Response`, for the standalone dashboard
        (aiohttp is imported here, on first use, never by the agent)."""
        from aiohttp import web

        return web.Response(body=self.body, status=self.status, content_type=self.content_type,
                            headers=self.headers)


Handler = Callable[[Request], Awaitable[Response]]


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


_date_cache: tuple[int, str] = (0, "")


def http_date(now: float | None = None) -> str:
    """The IMF-fixdate of `now` (default: this second), independent of the locale."""
    global _date_cache
    second = int(time.time() if now is None else now)
    if _date_cache[0] != second:
        t = time.gmtime(second)
        _date_cache = (second, f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} "
                               f"{t.tm_year} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")
    return _date_cache[1]


def error_body(status: int, message: str) -> bytes:
    """The JSON error document every refusal carries."""
    return json.dumps({"error": message, "status": status}, separators=(",", ":")).encode()


def json_error(status: int, message: str) -> Response:
    """A JSON error response with the given status, not to be cached."""
    return Response(status, error_body(status, message), JSON, {"Cache-Control": "no-store"})


def refusal_bytes(status: int, message: str) -> bytes:
    """A whole JSON error response that closes the connection, to write straight to a socket."""
    response = json_error(status, message)
    return response.head(close=True) + response.body


def json_response(value: Any, status: int = 200, compact: bool = False) -> Response:
    """`value` as a JSON response (`compact`: without spaces after separators)."""
    text = json.dumps(value, separators=(",", ":")) if compact else json.dumps(value)
    return Response(status, text.encode(), f"{JSON}; charset=utf-8")
