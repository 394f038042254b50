"""`ray-accel dashboard`: the Accelerators tab on a port of its own, outside Ray's dashboard.

Token support matches Ray's dashboard: with a token configured, every API
request needs `Authorization: Bearer <token>` (or `X-Ray-Authorization`), or
the `ray-authentication-token` cookie that `POST /accelerators/api/authenticate`
sets; without one it gets 401, with a wrong one 403. The page itself and its
assets are public, so the browser can show a sign-in prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from ..exporter.aiohttp_serving import access_middleware, errors_as_json
from ..exporter.aiohttp_serving import serve as start_serving
from ..exporter.exposure import add_web_config_argument
from ..exporter.serving import ServingLimits, raise_open_file_limit
from ..exporter.web_auth import COOKIE, AccessPolicy, cluster_token, is_loopback
from ..exporter.web_auth import presented_token as _presented
from ..exporter.web_auth import same_secret as _valid
from ..exporter.web_config import WebConfigError, WebConfigWatcher
from .api import PREFIX, AcceleratorsApi, error_response
from .collector import DEFAULT_REFRESH_S, Collector, Discover, registry_discovery
from .prometheus_history import PrometheusConfigError, check_url, configured

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8266
_PUBLIC = ("/", PREFIX, PREFIX + "/", PREFIX + "/index.html", PREFIX + "/api/authenticate")


def token_middleware(token: str | None):
    @web.middleware
    async def check(request: web.Request, handler):
        if token is None or request.path in _PUBLIC or request.path.startswith(
                PREFIX + "/assets/"):
            return await handler(request)
        presented = _presented(request.headers, request.cookies)
        if presented is None:
            return error_response(401, "missing token: send Authorization: Bearer <token>")
        if not _valid(token, presented):
            return error_response(403, "invalid token")
        return await handler(request)

    return check


def build_app(api: AcceleratorsApi, token: str | None = None,
              web_config: WebConfigWatcher | None = None) -> web.Application:
    """The standalone aiohttp application around `api`.

    With basic-auth users in `web_config`, every path (the page included) needs
    one of them or the token; the API still needs the token when one is set.
    """
    middlewares = [errors_as_json, token_middleware(token)]
    if web_config is not None:
        middlewares.insert(0, access_middleware(AccessPolicy(token, "token", web_config.users,
                                                             open_paths=frozenset())))
    app = web.Application(middlewares=middlewares, client_max_size=16 * 1024)

    async def root(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(PREFIX + "/")

    async def authenticate(request: web.Request) -> web.StreamResponse:
        if token is None:
            return error_response(404, "token authentication is not enabled")
        presented = _presented(request.headers, request.cookies)
        if presented is None:
            return error_response(401, "missing token: send Authorization: Bearer <token>")
        if not _valid(token, presented):
            return error_response(403, "invalid token")
        response = web.json_response({"status": "authenticated"})
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/",
                            max_age=30 * 24 * 3600)
        return response

    async def everything(request: web.Request) -> web.StreamResponse:
        return await api.handle(request, request.match_info.get("tail", ""))

    app.router.add_get("/", root)
    app.router.add_get(PREFIX, root)
    app.router.add_post(PREFIX + "/api/authenticate", authenticate)
    app.router.add_route("*", PREFIX + "/{tail:.*}", everything)

    async def lifecycle(app: web.Application):
        await api.collector.start()
        yield
        await api.collector.stop()

    app.cleanup_ctx.append(lifecycle)
    return app


def read_token(path: str | None) -> str | None:
    """The token to require: from `path`, else Ray's own token when Ray's auth is on."""
    if path is not None:
        token = Path(path).read_text().strip()
        if not token:
            raise ValueError(f"{path} is empty")
        return token
    return cluster_token()


def ray_facts(gcs_address: str) -> tuple[str | None, str]:
    """Where the cluster's own dashboard serves (None when unknown) and its Ray session
    (its series' SessionName; "" when unknown), from the GCS's key-value store."""
    try:
        from ..exporter.cluster.gcs import ClusterGcs

        with ClusterGcs(gcs_address, timeout_s=3.0) as gcs:
            raw_address = gcs.kv_get("dashboard", "dashboard")
            raw_session = gcs.kv_get("session", "session_name")
    except Exception as error:
        log.debug("dashboard address and session unknown: %s", error)
        return None, ""
    session = raw_session.decode(errors="replace").strip() if raw_session else ""
    if not raw_address:
        return None, session
    address = raw_address.decode(errors="replace").strip()
    return (address if address.startswith("http") else f"http://{address}"), session


def ray_dashboard_url(gcs_address: str) -> str | None:
    """Where the cluster's own dashboard serves, from the GCS (None when unknown)."""
    return ray_facts(gcs_address)[0]


async def serve(api: AcceleratorsApi, host: str, port: int, token: str | None,
                ready=None, limits: ServingLimits | None = None,
                web_config: WebConfigWatcher | None = None) -> None:
    """Serve until SIGINT/SIGTERM."""
    serving = await start_serving(build_app(api, token, web_config), host, port, limits,
                                  web_config.ssl_context if web_config else None)
    if web_config is not None:
        await web_config.start()
    print(f"ray-accel dashboard serving {serving.url}{PREFIX}/", flush=True)
    if ready is not None:
        ready(serving.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        if web_config is not None:
            await web_config.stop()
        await serving.close()


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port must be an integer, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"--port must be between 0 and 65535, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0.2 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0.2 and 3600 s, got {text}")
    return value


def _prometheus_url(text: str) -> str:
    try:
        return check_url(text)
    except PrometheusConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def register(commands) -> None:
    """Add the `dashboard` subcommand to the `ray-accel` command line."""
    parser = commands.add_parser(
        "dashboard", help="serve the Accelerators tab (cluster view of every agent) standalone")
    parser.add_argument("--address", metavar="ADDR",
                        help="GCS address of the Ray cluster (default: RAY_ADDRESS, else the "
                             "Ray node on this host)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT,
                        help=f"port (default {DEFAULT_PORT}; 0 picks one)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="require this token (default: the cluster's Ray token when Ray's "
                             "token authentication is on)")
    parser.add_argument("--no-token", action="store_true",
                        help="require no token (only sensible on a loopback address)")
    add_web_config_argument(parser)
    parser.add_argument("--prometheus", type=_prometheus_url, metavar="URL",
                        help="the cluster's Prometheus, for the tab's history over hours and "
                             "days (default: RAY_PROMETHEUS_HOST when set, else the head's "
                             "in-memory history)")
    parser.add_argument("--refresh", type=_seconds, default=DEFAULT_REFRESH_S, metavar="SECONDS",
                        help=f"how often to pull every agent (default {DEFAULT_REFRESH_S:g} s)")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser,
         discover: Discover | None = None) -> int:
    from ..exporter.attribution.ray_sources import RayNotFound, RaySourceError
    from ..exporter.cluster.gcs import resolve_gcs_address

    if args.no_token and args.token_file:
        parser.error("--no-token and --token-file exclude each other")
    try:
        web_config = WebConfigWatcher(args.web_config_file) if args.web_config_file else None
    except WebConfigError as error:
        parser.error(f"--web-config-file: {error}")
    try:
        token = None if args.no_token else read_token(args.token_file)
    except (OSError, ValueError) as error:
        parser.error(f"--token-file: {error}")
    try:
        address = resolve_gcs_address(args.address)
    except (RayNotFound, RaySourceError) as error:
        print(f"ray-accel dashboard: {error}", file=sys.stderr)
        return 1
    if token is None and not is_loopback(args.host) and not (web_config and web_config.users()):
        log.warning("serving on %s without a token: anyone who reaches it can read the "
                    "cluster's accelerator data", args.host)
    collector = Collector(discover or registry_discovery(address), refresh_s=args.refresh)
    dashboard_url, session_name = ray_facts(address)
    prometheus, prometheus_error = configured(os.environ, session_name, args.prometheus)
    if prometheus_error:
        log.warning("%s", prometheus_error)

    async def session_now() -> str:
        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(None, ray_facts, address))[1]

    api = AcceleratorsApi(collector, "standalone", dashboard_url,
                          prometheus=prometheus, prometheus_error=prometheus_error,
                          prometheus_session=session_now)
    raise_open_file_limit()
    try:
        asyncio.run(serve(api, args.host, args.port, token, web_config=web_config))
    except OSError as error:
        print(f"ray-accel dashboard: cannot listen on {args.host}:{args.port}: {error}",
              file=sys.stderr)
        return 1
    return 0
