"""Ray's cluster token, found where Ray's own clients find it, without importing Ray.

Ray 2.60's loader (C++ `AuthenticationTokenLoader`, docs/ray-internals.md)
looks, in order, at RAY_AUTH_TOKEN; the file RAY_AUTH_TOKEN_PATH names (an
error when set but missing or empty); with RAY_ENABLE_K8S_TOKEN_AUTH on, the
pod's service-account token; then ~/.ray/auth_token (HOME). A file gives its
first line; every source is stripped of surrounding whitespace.

Token mode is RAY_AUTH_MODE=token. A client started without RAY_AUTH_MODE
turns it on when a token is found, as `ray.init(address="auto")` does
(`enable_if_token_available`), and sends the token on every call.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"
TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
TOKEN_PATH_VARIABLE = "RAY_AUTH_TOKEN_PATH"
K8S_VARIABLE = "RAY_ENABLE_K8S_TOKEN_AUTH"
K8S_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
_WHITESPACE = " \t\n\r\f\v"


class TokenError(RuntimeError):
    """RAY_AUTH_TOKEN_PATH names a file that cannot be read or is empty."""


def token_mode() -> bool:
    """True when this process runs with Ray's token authentication on."""
    return os.environ.get(AUTH_MODE_VARIABLE, "").lower() == "token"


def enable_if_token_available() -> bool:
    """Turn token mode on for this process when RAY_AUTH_MODE is unset and a token exists.

    An explicit RAY_AUTH_MODE is respected as it is. Returns whether token mode is on.
    """
    if AUTH_MODE_VARIABLE in os.environ:
        return token_mode()
    try:
        found = find_token() is not None
    except TokenError:
        found = False
    if found:
        os.environ[AUTH_MODE_VARIABLE] = "token"
    return found


def find_token() -> str | None:
    """The token from the first source that has one; None when no source has one.

    Raises `TokenError` when RAY_AUTH_TOKEN_PATH is set but unusable, as Ray does.
    """
    from_variable = os.environ.get(TOKEN_VARIABLE, "")
    if from_variable:
        return from_variable.strip(_WHITESPACE) or None
    path = os.environ.get(TOKEN_PATH_VARIABLE, "")
    if path:
        token = _first_line(path)
        if not token:
            raise TokenError(f"{TOKEN_PATH_VARIABLE} is set but {path} cannot be read or "
                             "is empty")
        return token
    if os.environ.get(K8S_VARIABLE, "").lower() in ("1", "true"):
        token = _first_line(K8S_TOKEN_PATH)
        if token:
            return token
    return _first_line(_default_token_path()) or None


def _default_token_path() -> str:
    home = os.environ.get("HOME", "")
    return str(Path(home or ".") / ".ray" / "auth_token")


# path -> (the file's identity and times when read, its first line)
_read_lines: dict[str, tuple[tuple[int, ...], str]] = {}
# A file changed this recently is read on every call: file times tick coarsely (a few
# milliseconds), so a second change within the same tick would leave them as they were.
SETTLED_AFTER_NS = 1_000_000_000


def _first_line(path: str) -> str:
    """The file's first line, stripped; "" when it cannot be read. Read again only when
    its inode, size, modification or status time changed (a rotation, a chmod), and on
    every call while it changed less than `SETTLED_AFTER_NS` ago."""
    try:
        status = os.stat(path)
        seen = (status.st_ino, status.st_dev, status.st_size, status.st_mtime_ns,
                status.st_ctime_ns)
        known = _read_lines.get(path)
        if known is not None and known[0] == seen:
            return known[1]
        with open(path, encoding="utf-8", errors="replace") as token_file:
            line = token_file.readline().strip(_WHITESPACE)
    except OSError:
        _read_lines.pop(path, None)
        return ""
    if time.time_ns() - max(status.st_mtime_ns, status.st_ctime_ns) > SETTLED_AFTER_NS:
        _read_lines[path] = (seen, line)
    else:
        _read_lines.pop(path, None)
    return line


def current_token() -> str | None:
    """The token to send: found afresh on each call while token mode is on, else None.

    Ray's loader caches the token until told to reload; looking at the sources on
    every call (a file is read again when it changed) uses a rotated token at once
    and a token that became unreadable is not sent.
    """
    if not token_mode():
        return None
    try:
        return find_token()
    except TokenError:
        return None


def auth_metadata() -> tuple[tuple[str, str], ...]:
    """gRPC metadata that presents the token (empty without one), as Ray's interceptor sends."""
    token = current_token()
    return (("authorization", f"Bearer {token}"),) if token else ()
