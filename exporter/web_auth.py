"""Who may read the agent's endpoints: Ray's cluster token and web-config basic-auth users.

`AccessPolicy` decides per path: open paths (`/healthz`) answer anyone;
`/metrics` needs credentials under `metrics_auth="token"`; every other path
needs them whenever any credential is configured. Accepted credentials are
`Authorization: Bearer <token>` (or `X-Ray-Authorization`, or the
`ray-authentication-token` cookie, as Ray's dashboard accepts) matching the
cluster token, or HTTP basic auth matching a bcrypt hash of the web
configuration file (web_config.py). Missing or wrong credentials get a JSON 401.

The policy decides from a path, a case-insensitive headers mapping and the
request's cookies, so it serves the agent's own server (exporter/httpd/) and,
through `aiohttp_serving.access_middleware`, the standalone dashboard alike.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .httpd.messages import Response, json_error

log = logging.getLogger(__name__)

COOKIE = "ray-authentication-token"  # the cookie Ray's own dashboard uses
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
METRICS_AUTH_CHOICES = ("token", "none")
OPEN_PATHS = frozenset({"/healthz"})
_BCRYPT_AT_ONCE = 2  # bcrypt costs ~0.1 s of CPU per check: bound the CPU a client can take
_REMEMBERED_LOGINS = 64


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def presented_token(headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
    """The bearer token a request carries (headers first, then Ray's cookie), if any.

    `headers` must look names up case-insensitively (aiohttp's and httpd's do)."""
    header = headers.get("Authorization") or headers.get("X-Ray-Authorization") or ""
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic":
            return None
        return value.strip() if scheme.lower() == "bearer" else header.strip()
    return cookies.get(COOKIE)


def same_secret(expected: str, presented: str | None) -> bool:
    """Constant-time comparison of a presented secret with the expected one."""
    return presented is not None and hmac.compare_digest(presented.encode(), expected.encode())


def cluster_token() -> str | None:
    """Ray's cluster token when Ray's token authentication is on here, else None.

    Found where Ray's own clients find it (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH,
    ~/.ray/auth_token), as Ray's loader does, without importing Ray.
    """
    from .attribution.ray_token import current_token

    return current_token()


def auth_headers(token: str | None) -> dict[str, str]:
    """The request headers that present `token` to an agent (none without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class BasicUsers:
    """Checks HTTP basic credentials against bcrypt hashes, remembering recent successes."""

    def __init__(self, hashes: dict[str, bytes]) -> None:
        self._hashes = dict(hashes)
        self._remembered: dict[tuple[str, bytes], None] = {}
        self._at_once = asyncio.Semaphore(_BCRYPT_AT_ONCE)

    def __bool__(self) -> bool:
        return bool(self._hashes)

    async def check(self, header: str) -> bool:
        """True when `header` (an Authorization value) names a user with its password."""
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode(
                "utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self._hashes.get(user)
        if not sep or hashed is None:
            return False
        key = (user, hashlib.sha256(hashed + b"\0" + password.encode()).digest())
        if key in self._remembered:
            return True
        import bcrypt

        async with self._at_once:
            try:
                ok = await asyncio.to_thread(bcrypt.checkpw, password.encode(), hashed)
            except ValueError:  # a password over bcrypt's 72 bytes matches no hash
                return False
        if ok:
            if len(self._remembered) >= _REMEMBERED_LOGINS:
                self._remembered.pop(next(iter(self._remembered)))
            self._remembered[key] = None
        return ok


@dataclass(frozen=True)
class Refusal:
    """Why a request is not served: its status, message and WWW-Authenticate challenge."""

    message: str
    challenge: str
    status: int = 401

    def response(self) -> Response:
        """The JSON error answering the refused request, with its challenge."""
        response = json_error(self.status, self.message)
        response.headers["WWW-Authenticate"] = self.challenge
        return response


@dataclass(frozen=True)
class AccessPolicy:
    """What each path requires. `users` is read on every request, so a reload takes effect."""

    token: str | None
    metrics_auth: str  # "token" or "none"
    users: Callable[[], BasicUsers]
    open_paths: frozenset[str] = OPEN_PATHS

    def __post_init__(self) -> None:
        if self.metrics_auth not in METRICS_AUTH_CHOICES:
            raise ValueError(f"metrics auth must be one of {', '.join(METRICS_AUTH_CHOICES)}, "
                             f"got {self.metrics_auth!r}")

    def guarded(self, path: str) -> bool:
        """Whether `path` needs credentials under this policy now."""
        if path in self.open_paths:
            return False
        if path == "/metrics" and self.metrics_auth == "none":
            return False
        return self.token is not None or bool(self.users())

    async def admits(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> bool:
        """Whether a request with these headers and cookies carries accepted credentials."""
        if self.token is not None and same_secret(self.token, presented_token(headers, cookies)):
            return True
        users = self.users()
        header = headers.get("Authorization", "")
        return bool(users) and bool(header) and await users.check(header)

    async def refusal(self, path: str, headers: Mapping[str, str],
                      cookies: Mapping[str, str]) -> Refusal | None:
        """None when a request for `path` may be served, else why not."""
        if not self.guarded(path) or await self.admits(headers, cookies):
            return None
        has_any = bool(headers.get("Authorization") or headers.get("X-Ray-Authorization")
                       or cookies.get(COOKIE))
        return Refusal("invalid credentials" if has_any else
                       "credentials required: send Authorization: Bearer <the cluster's Ray "
                       "token> (or basic auth where configured)", self.challenge())

    def challenge(self) -> str:
        schemes = (['Bearer realm="ray-accel"'] if self.token is not None else []) + (
            ['Basic realm="ray-accel"'] if self.users() else [])
        return ", ".join(schemes)
