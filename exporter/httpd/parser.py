"""Parsing of HTTP/1.1 request heads and finding where a request's body ends (RFC 9112).

Strict where laxness lets a request mean two things (request smuggling): bare
line folding, whitespace before a field's colon, a Content-Length that is not
one number, Transfer-Encoding together with Content-Length, and a transfer
coding other than a final `chunked` are refused with 400. Error messages
describe what is wrong without repeating the client's bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from .messages import Headers, Request

_METHOD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")
_TARGET = re.compile(rb"[\x21-\x7e]+")
_FIELD_NAME = _METHOD  # both are RFC 9110 tokens
_FIELD_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_DIGITS = re.compile(r"[0-9]{1,15}")  # str.isdigit() also takes other scripts' digits
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})[ \t]*(;[^\r\n]*)?")


class HttpError(Exception):
    """A request that cannot be served; `status` and `message` are what the client gets."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class RequestHead:
    """A parsed request head and how its body is framed."""

    request: Request
    content_length: int  # 0 without a body or with a chunked one
    chunked: bool


def check_incomplete(buffer: bytes | bytearray, max_line: int, max_headers: int) -> None:
    """Raises HttpError when the start of a head already breaks the line or field limits."""
    lines = bytes(buffer).split(b"\r\n")
    if any(len(line) > max_line for line in lines):
        raise HttpError(400, f"request line or header line longer than {max_line} bytes")
    if len(lines) - 2 > max_headers:  # complete lines beyond the request line
        raise HttpError(400, f"more than {max_headers} header fields")


def parse_head(head: bytes, max_line: int, max_headers: int, peer: str = "?") -> RequestHead:
    """The request in `head` (its bytes up to, not including, the empty line)."""
    request_line, *field_lines = head.split(b"\r\n")
    if len(request_line) > max_line or any(len(line) > max_line for line in field_lines):
        raise HttpError(400, f"request line or header line longer than {max_line} bytes")
    if len(field_lines) > max_headers:
        raise HttpError(400, f"more than {max_headers} header fields")
    method, target, version = _request_line(request_line)
    fields = [_field(line) for line in field_lines]
    headers = Headers(fields)
    path, query = _target(target)
    request = Request(method, path, query, headers, version, peer)
    hosts = sum(1 for name, _ in fields if name.lower() == "host")
    if version == "HTTP/1.1" and hosts != 1:
        raise HttpError(400, "a request needs exactly one Host header field")
    content_length, chunked = _framing(fields, version)
    return RequestHead(request, content_length, chunked)


def _request_line(line: bytes) -> tuple[str, bytes, str]:
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "invalid request line")
    method, target, version = parts
    if not _METHOD.fullmatch(method):
        raise HttpError(400, "invalid HTTP method")
    matched = _VERSION.fullmatch(version)
    if matched is None:
        raise HttpError(400, "invalid request line")
    if matched.group(1) != b"1":
        raise HttpError(505, "only HTTP/1.0 and HTTP/1.1 are served")
    if not _TARGET.fullmatch(target):
        raise HttpError(400, "invalid request target")
    return method.decode("ascii"), target, "HTTP/1.1" if matched.group(2) != b"0" else "HTTP/1.0"


def _field(line: bytes) -> tuple[str, str]:
    if line[:1] in (b" ", b"\t"):
        raise HttpError(400, "obsolete line folding in a header field")
    name, colon, value = line.partition(b":")
    if not colon or not _FIELD_NAME.fullmatch(name):
        raise HttpError(400, "invalid header field name")
    value = value.strip(b" \t")
    if _FIELD_VALUE_BAD.search(value):
        raise HttpError(400, "invalid character in a header field value")
    return name.decode("ascii"), value.decode("latin-1")


def _target(target: bytes) -> tuple[str, dict[str, list[str]]]:
    text = target.decode("ascii")
    if text == "*":  # asterisk-form (OPTIONS *): no resource here answers it
        return "*", {}
    if text.startswith("/"):
        raw_path, _, raw_query = text.partition("?")
        raw_path = raw_path.partition("#")[0]
    elif text.lower().startswith(("http://", "https://")):  # absolute-form (RFC 9112 3.2.2)
        parts = urlsplit(text)
        raw_path, raw_query = parts.path or "/", parts.query
    else:
        raise HttpError(400, "invalid request target")
    query: dict[str, list[str]] = {}
    for name, value in parse_qsl(raw_query.partition("#")[0], keep_blank_values=True,
                                 errors="replace"):
        query.setdefault(name, []).append(value)
    return unquote(raw_path, errors="replace"), query


def _framing(fields: list[tuple[str, str]], version: str) -> tuple[int, bool]:
    lengths = {value.strip() for name, value in fields if name.lower() == "content-length"
               for value in value.split(",")}
    codings = [coding.strip().lower() for name, value in fields
               if name.lower() == "transfer-encoding" for coding in value.split(",")]
    if codings:
        if lengths:
            raise HttpError(400, "Content-Length and Transfer-Encoding together")
        if version != "HTTP/1.1" or codings[-1] != "chunked" or codings.count("chunked") > 1:
            raise HttpError(400, "unsupported Transfer-Encoding (chunked must come last)")
        return 0, True
    if not lengths:
        return 0, False
    if len(lengths) != 1 or not _DIGITS.fullmatch(next(iter(lengths))):
        raise HttpError(400, "invalid Content-Length")
    return int(next(iter(lengths))), False


def chunked_end(buffer: bytes | bytearray, start: int, max_bytes: int) -> int | None:
    """Where a chunked body beginning at `start` ends (after its trailer section), or None
    while incomplete. HttpError: 413 beyond `max_bytes` of chunk data, 400 when malformed."""
    at, data = start, 0
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            if len(buffer) - at > 64:
                raise HttpError(400, "invalid chunk size line")
            return None
        matched = _CHUNK_SIZE.fullmatch(bytes(buffer[at:line_end]))
        if matched is None:
            raise HttpError(400, "invalid chunk size line")
        size = int(matched.group(1), 16)
        data += size
        if data > max_bytes:
            raise HttpError(413, f"request body larger than {max_bytes} bytes")
        at = line_end + 2
        if size == 0:
            break
        if len(buffer) < at + size + 2:
            return None
        if buffer[at + size:at + size + 2] != b"\r\n":
            raise HttpError(400, "chunk not followed by CRLF")
        at += size + 2
    while True:  # the trailer section: field lines, then an empty line
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            if len(buffer) - at > 8192:
                raise HttpError(400, "trailer section too long")
            return None
        if line_end == at:
            return at + 2
        at = line_end + 2
