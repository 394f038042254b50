"""How an agent is exposed: which token it requires, whether /metrics needs it, TLS, users.

Rules (docs/security.md):
- the token is the one in `token_file`, else Ray's cluster token when Ray's
  token authentication is on and the agent is deployed (`ray-accel deploy`) or
  listens beyond loopback; a standalone agent on loopback requires no token
  unless a file is given;
- `/metrics` needs credentials under `metrics_auth="token"`, the default beyond
  loopback and wherever basic-auth users are configured (exporter-toolkit's
  meaning of them); `"none"` leaves it open (the default otherwise);
- `/healthz` is always open (liveness probes, `ray-accel status`);
- a web configuration file (web_config.py) adds TLS and basic-auth users; a
  basic-auth user is accepted wherever the token is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .httpd import Handler, Request, Response
from .web_auth import METRICS_AUTH_CHOICES, AccessPolicy, BasicUsers, cluster_token, is_loopback
from .web_config import WebConfigError, WebConfigWatcher

log = logging.getLogger(__name__)

_NO_USERS = BasicUsers({})


class ExposureError(ValueError):
    """The exposure settings cannot be honoured; nothing was started."""


@dataclass(frozen=True)
class ExposureSettings:
    """What the command line or `ray-accel deploy` asked for."""

    metrics_auth: str | None = None  # None: "token" beyond loopback, "none" on loopback
    token_file: str | None = None
    web_config_file: str | None = None

    def __post_init__(self) -> None:
        if self.metrics_auth is not None and self.metrics_auth not in METRICS_AUTH_CHOICES:
            raise ExposureError(f"metrics auth must be one of {', '.join(METRICS_AUTH_CHOICES)}, "
                                f"got {self.metrics_auth!r}")


def read_token_file(path: str) -> str:
    """The token in `path` (surrounding whitespace removed); ExposureError when unusable."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise ExposureError(f"token file {path}: {error}") from None
    if not token:
        raise ExposureError(f"token file {path} is empty")
    return token


class Exposure:
    """The resolved settings of one server: its access policy, TLS context and file watcher."""

    def __init__(self, host: str, settings: ExposureSettings, deployed: bool = False) -> None:
        """Resolves the token and loads the web configuration; raises ExposureError."""
        self.watcher: WebConfigWatcher | None = None
        if settings.web_config_file:
            try:
                self.watcher = WebConfigWatcher(settings.web_config_file)
            except WebConfigError as error:
                raise ExposureError(f"web configuration file {error}") from None
        loopback = is_loopback(host)
        if settings.token_file:
            self.token: str | None = read_token_file(settings.token_file)
        else:
            self.token = cluster_token() if deployed or not loopback else None
        self.metrics_auth = settings.metrics_auth or (
            "token" if not loopback or self.users() else "none")
        if settings.metrics_auth == "token" and self.token is None and not self.users():
            raise ExposureError("--metrics-auth token: there is no token to require (Ray's "
                                "token authentication is off here and no --token-file or "
                                "basic_auth_users is given)")
        self.policy = AccessPolicy(self.token, self.metrics_auth, self.users)
        if not loopback and self.token is None and not self.users():
            log.warning("serving on %s without credentials: anyone who reaches it can read "
                        "pids, Ray ids and names of this node's accelerator users", host)

    def users(self) -> BasicUsers:
        return self.watcher.users() if self.watcher is not None else _NO_USERS

    @property
    def ssl_context(self):
        return self.watcher.ssl_context if self.watcher is not None else None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def guard(self, handler: Handler) -> Handler:
        """`handler` behind this exposure's access policy (JSON 401 with a challenge)."""
        policy = self.policy

        async def guarded(request: Request) -> Response:
            refusal = await policy.refusal(request.path, request.headers, request.cookies)
            return await handler(request) if refusal is None else refusal.response()

        return guarded

    async def start(self) -> None:
        if self.watcher is not None:
            await self.watcher.start()

    async def stop(self) -> None:
        if self.watcher is not None:
            await self.watcher.stop()

    def describe(self) -> str:
        """One line for the start-up log: what is required where."""
        guarded = "token" if self.token else ""
        if self.users():
            guarded = f"{guarded} or basic auth" if guarded else "basic auth"
        if not guarded:
            return f"{self.scheme}, no credentials required"
        metrics = "open" if self.metrics_auth == "none" else guarded
        return f"{self.scheme}; /metrics: {metrics}; /healthz: open; other endpoints: {guarded}"


def add_web_config_argument(parser) -> None:
    """`--web-config-file`, shared by the agent, `deploy` and the standalone dashboard."""
    parser.add_argument("--web-config-file", metavar="FILE",
                        help="TLS and basic auth, in the web configuration format of "
                             "Prometheus' exporter-toolkit (re-read when it changes)")


def add_exposure_arguments(parser) -> None:
    """The agent's exposure flags (see the module docstring for the defaults)."""
    group = parser.add_argument_group("Exposure (docs/security.md)")
    group.add_argument("--metrics-auth", choices=METRICS_AUTH_CHOICES,
                       help="whether /metrics needs credentials: the token or a basic-auth "
                            "user (default: token when listening beyond loopback or with "
                            "basic-auth users, else none)")
    group.add_argument("--token-file", metavar="FILE",
                       help="require this token (default: the cluster's Ray token when "
                            "listening beyond loopback and Ray's token authentication is on)")
    add_web_config_argument(group)


def exposure_settings(args) -> ExposureSettings:
    return ExposureSettings(metrics_auth=args.metrics_auth, token_file=args.token_file,
                            web_config_file=args.web_config_file)
