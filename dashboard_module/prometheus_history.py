"""The tab's time series from the cluster's Prometheus: PromQL range queries.

When a Prometheus is configured (Ray's `RAY_PROMETHEUS_HOST` / `RAY_PROMETHEUS_HEADERS`,
or `ray-accel dashboard --prometheus URL`), the cluster's, a node's, a device's and a
job's series over 1 h, 6 h, 24 h or 7 d come from `/api/v1/query_range`, on a grid of
at most `max_points` whole steps (points stay in place from one refresh to the next),
the last at or after the request. Every selector carries the Grafana boards' own
`SessionName` and `Cluster` filters (grafana/promql.py), filled with this head's
session and cluster. Answers are cached for a step (at most 30 s). Over 6 h, 24 h and
7 d the cluster's series are summed from the recording rules' series
(grafana/alerts/recording.py) when Prometheus holds them for this session and cluster,
which one instant query finds out every `RECORDED_CHECK_S`; else, and over 1 h, they are
aggregated from every device's series by the same definitions.

A Prometheus that is down, slow (`timeout_s`), answers an error or holds none of the
series costs only that answer: `TabHistory` then serves the head's in-memory history
with the reason, and does not ask a failing one again for `retry_after_s`.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from ..exporter import catalog as m
from ..grafana.alerts.recording import (
    PRESENCE_PART,
    named,
    raw_cluster_queries,
    record_name,
    recorded_cluster_queries,
)
from ..grafana.promql import CLUSTER_FILTER, SESSION_FILTER, eq, literal_pattern, selector
from ..grafana.queries import expand
from .bounded_read import BodyTooLarge, read_at_most
from .history import History, memory_series

HOST_VARIABLE = "RAY_PROMETHEUS_HOST"  # Ray's dashboard reads the same two
HEADERS_VARIABLE = "RAY_PROMETHEUS_HEADERS"
CLUSTER_VARIABLE = "RAY_ACCEL_PROMETHEUS_CLUSTER"
TIMEOUT_VARIABLE = "RAY_ACCEL_PROMETHEUS_TIMEOUT_S"

RANGES: dict[str, int] = {"1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 86400}
DEFAULT_RANGE = "1h"
DEFAULT_MAX_POINTS = 300
DEFAULT_TIMEOUT_S = 3.0
DEFAULT_RETRY_AFTER_S = 10.0
MAX_CACHE_S = 30.0
LOOKBACK_S = 300  # Prometheus' default query.lookback-delta
MAX_SCRAPE_INTERVAL_S = 60  # the longest scrape interval the grid allows for
MAX_CACHED = 512
MAX_ANSWER_BYTES = 16 * 2**20
MAX_WARNINGS = 5  # of Prometheus' warnings (a partial answer, ...) passed on per answer
# Queries in flight to Prometheus at once, whatever the number of tabs open.
MAX_CONCURRENT_QUERIES = 8

SCOPES = ("cluster", "node", "device", "job")
# Ranges whose cluster series read the recording rules' series when Prometheus has them
# (grafana/alerts/recording.py). Over 1 h the raw query is exact on its 12 s grid, reads
# an hour of each device's samples, and shows the whole hour as soon as the agents are
# scraped; from 6 h on a step (72 s and more) spans several rule evaluations, so a
# recorded value is at most one evaluation older than the raw one, and the raw cost
# (every device's samples over the whole range) is what recording rules remove.
RECORDED_RANGES = ("6h", "24h", "7d")
RECORDED_CHECK_S = 300.0  # how long whether the recorded series exist is remembered
# A head that looks its Ray session up (the standalone dashboard, whose cluster may restart
# under it) asks again this often, and this often while it does not know it.
SESSION_CHECK_S = 30.0
SESSION_RETRY_S = 5.0
SessionSource = Callable[[], Awaitable[str]]  # the cluster's Ray session now; "" if unknown


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab is allowed in a value


class PrometheusConfigError(ValueError):
    """A Prometheus URL or header setting that cannot be used."""


@dataclass(frozen=True)
class PrometheusSettings:
    """Where the cluster's Prometheus is and which of its series are this cluster's."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    session_name: str = ""  # "" matches every session
    cluster: str = ""  # the ray_io_cluster label; "" matches every cluster
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def shown_url(self) -> str:
        """The URL without its user name and password, for answers and messages."""
        parts = urlsplit(self.url)
        if parts.username is None and parts.password is None:
            return self.url
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=host))


def check_url(url: str) -> str:
    """`url` without a trailing slash; PrometheusConfigError unless it is http(s)://host..."""
    try:
        parts = urlsplit(url.strip())
        usable = (parts.scheme in ("http", "https") and bool(parts.hostname)
                  and not parts.query and not parts.fragment and parts.port != 0)
    except ValueError:  # a host or port that cannot be parsed (`.port` raises too)
        usable = False
    if not usable:
        raise PrometheusConfigError(
            f"a Prometheus URL looks like http://host:9090, got {url[:200]!r}")
    return url.strip().rstrip("/")


def parse_headers(text: str) -> tuple[tuple[str, str], ...]:
    """Headers as Ray accepts them: a JSON object of strings, or a list of [name, value]."""
    try:
        parsed = json.loads(text)
    except ValueError as error:
        raise PrometheusConfigError(f"{HEADERS_VARIABLE} is not JSON: {error}") from None
    pairs = list(parsed.items()) if isinstance(parsed, dict) else parsed
    if not isinstance(pairs, list) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, str) for v in p)
            for p in pairs):
        raise PrometheusConfigError(
            f'{HEADERS_VARIABLE} must be {{"Name": "value", ...}} or [["Name", "value"], ...]')
    for name, value in pairs:
        if not _HEADER_NAME.fullmatch(name) or _CONTROL.search(value):
            raise PrometheusConfigError(
                f"{HEADERS_VARIABLE}: {name[:60]!r} is not a header name, or its value holds "
                "a line break or another control character")
    return tuple((name, value) for name, value in pairs)


def settings_from_env(environ: Mapping[str, str], session_name: str = "",
                      url: str | None = None) -> PrometheusSettings | None:
    """Settings from `url` (a flag) or Ray's variables; None when no Prometheus is named."""
    url = url or environ.get(HOST_VARIABLE, "")
    if not url:
        return None
    return PrometheusSettings(check_url(url), parse_headers(environ.get(HEADERS_VARIABLE, "{}")),
                              session_name, environ.get(CLUSTER_VARIABLE, ""),
                              _timeout(environ.get(TIMEOUT_VARIABLE, "")))


def _timeout(text: str) -> float:
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0.1 <= seconds <= 60:
        raise PrometheusConfigError(f"{TIMEOUT_VARIABLE} must be seconds between 0.1 and 60, "
                                    f"got {text[:40]!r}")
    return seconds


def configured(environ: Mapping[str, str], session_name: str = "",
               url: str | None = None) -> tuple[PrometheusHistory | None, str]:
    """The history client `settings_from_env` names, or None and why the setting is unusable."""
    try:
        settings = settings_from_env(environ, session_name, url)
    except PrometheusConfigError as error:
        return None, f"the Prometheus setting is unusable, history is in-memory: {error}"
    return (PrometheusHistory(settings) if settings else None), ""


@dataclass(frozen=True)
class Scope:
    """Whose series: the cluster, a node (`ray_node_id`), a device (`uuid`) or a job."""

    kind: str
    key: str = ""

    def __post_init__(self) -> None:
        if self.kind not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {self.kind!r}")


def step_for(window_s: int, max_points: int) -> int:
    """The whole-second step that covers `window_s` in at most `max_points` points."""
    return max(1, math.ceil(window_s / max_points))


def _filters(settings: PrometheusSettings) -> tuple[str, ...]:
    values = {"SessionName": literal_pattern(settings.session_name) if settings.session_name
              else ".*",
              "Cluster": literal_pattern(settings.cluster) if settings.cluster else ".*"}
    return expand(SESSION_FILTER, values), expand(CLUSTER_FILTER, values)


def _windowed(step_s: int) -> Callable[[str], str]:
    """What reads a selector at each point of a grid of `step_s` (see `scope_queries`)."""
    if step_s > LOOKBACK_S - MAX_SCRAPE_INTERVAL_S:
        return lambda text: f"last_over_time({text}[{step_s + LOOKBACK_S}s])"
    return lambda text: text


def scope_queries(scope: Scope, filters: Sequence[str], step_s: int = 1,
                  recorded: bool = False) -> dict[str, str]:
    """PromQL per series name of `scope`; a name ending in `/uuid` is one series per device.

    With `recorded`, the cluster's series are summed from the recording rules' series
    instead of aggregated from every device's (the same aggregates: one definition).

    The last point lies up to a step after the request; where that can be beyond
    Prometheus' lookback from the latest scrape (steps of 4 minutes and more: 24 h, 7 d),
    each series reads its latest sample within the step and the lookback
    (`last_over_time`), so that it holds the current values and no point falls between
    two scrapes.
    """
    plain, window = selector(*filters), _windowed(step_s)

    def sel(name: str, *extra: str) -> str:
        return window(plain(name, *extra))

    general = eq("task", m.TASK_GENERAL)
    if scope.kind == "cluster":
        if recorded:
            return recorded_cluster_queries(lambda name: window(named(name, *filters)))
        return raw_cluster_queries(sel)
    if scope.kind == "node":
        node = eq("ray_node_id", scope.key)
        return {
            "utilization": f"avg({sel(m.GPU_UTILIZATION, general, node)})",
            "power_watts": f"sum({sel(m.POWER, node)})",
            # each device of the node as the device scope reads it
            **{f"{name}/uuid": expr for name, expr in _per_device(sel, node, "max by (uuid) ")
               .items() if name != "power_watts"},
        }
    if scope.kind == "device":
        return _per_device(sel, eq("uuid", scope.key), "max")
    held = sel(m.ALLOCATION, eq("ray_job_id", scope.key))
    return {
        "devices_held": f"sum({held})",
        "idle_allocations": f"sum({sel(m.ALLOCATION_IDLE)} * {held})",
        "utilization": f"avg({sel(m.GPU_UTILIZATION, general)} and on (uuid) ({held} > 0))",
        "memory_used_bytes": f"sum({sel(m.PROCESS_MEMORY_USAGE, eq('ray_job_id', scope.key))})",
    }


def _per_device(sel: Callable[..., str], matcher: str, aggregate: str) -> dict[str, str]:
    """A device's series among those `matcher` selects; `aggregate` keeps one per device."""
    general = eq("task", m.TASK_GENERAL)
    return {
        "utilization": f"{aggregate}({sel(m.GPU_UTILIZATION, general, matcher)})",
        "memory_used_bytes": f"{aggregate}({sel(m.MEMORY_USAGE, matcher)})",
        "power_watts": f"{aggregate}({sel(m.POWER, matcher)})",
    }


class PrometheusError(Exception):
    """Prometheus did not answer, or answered something other than a matrix."""


class PrometheusHistory:
    """Range queries for the tab's series against one Prometheus."""

    def __init__(self, settings: PrometheusSettings,
                 max_points: int = DEFAULT_MAX_POINTS) -> None:
        if max_points < 2:
            raise ValueError("max_points must be at least 2")
        self.settings = settings
        self.max_points = max_points
        self.filters = _filters(settings)
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_QUERIES)
        self._recorded: tuple[float, bool] = (-math.inf, False)  # (until, whether they exist)

    def scope_to_session(self, session_name: str) -> None:
        """Select another Ray session's series from now on."""
        self.settings = replace(self.settings, session_name=session_name)
        self.filters = _filters(self.settings)
        self._recorded = (-math.inf, False)

    @property
    def where(self) -> str:
        """How messages name this Prometheus."""
        return f"Prometheus at {self.settings.shown_url}"

    def grid(self, range_name: str, now: float) -> tuple[int, int, int]:
        """(start, end, step) in unix seconds on whole steps, `end` the first at or after
        `now`: it reads the latest samples (a point after the last scrape reads the newest
        within Prometheus' lookback), so the last point of a 7-day range is not half an
        hour old."""
        window = RANGES[range_name]
        step = step_for(window, self.max_points)
        end = math.ceil(now / step) * step
        return end - (window // step - 1) * step, end, step

    async def series(self, scope: Scope, range_name: str,
                     now: float | None = None) -> dict[str, Any]:
        """The scope's series on the range's grid (None where Prometheus has no value).

        Raises PrometheusError when any query fails: a partial answer is not shown as whole.
        """
        now = time.time() if now is None else now
        start, end, step = self.grid(range_name, now)
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        warnings: list[str] = []
        try:
            async with asyncio.timeout(self.settings.timeout_s), aiohttp.ClientSession(
                    timeout=timeout, headers=list(self.settings.headers)) as session:
                recorded = (scope.kind == "cluster" and range_name in RECORDED_RANGES
                            and await self._has_recorded(session, now, warnings))
                queries = scope_queries(scope, self.filters, step, recorded)
                results = await asyncio.gather(*(
                    self._query_range(session, expr, start, end, step, warnings)
                    for expr in queries.values()))
        except TimeoutError:
            raise PrometheusError(f"{self.where} did not answer within "
                                  f"{self.settings.timeout_s:g} s") from None
        except (aiohttp.ClientError, OSError) as error:
            raise PrometheusError(f"{self.where}: "
                                  f"{type(error).__name__}: {error}") from None
        count = (end - start) // step + 1
        body: dict[str, Any] = {"timestamps": [float(start + i * step) for i in range(count)],
                                "step_s": step, "recorded": recorded}
        if warnings:  # e.g. a partial answer: shown beside the series, not hidden
            body["warnings"] = sorted(set(warnings))[:MAX_WARNINGS]
        try:
            for name, matrix in zip(queries, results, strict=True):
                if name.endswith("/uuid"):
                    field = name.removesuffix("/uuid")
                    devices = body.setdefault("devices", {})
                    for entry in matrix:
                        uuid = entry["metric"].get("uuid", "")
                        devices.setdefault(uuid, {})[field] = on_grid(entry, start, step, count)
                else:
                    body[name] = (on_grid(matrix[0], start, step, count) if matrix
                                  else [None] * count)
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as error:
            raise PrometheusError(f"{self.where} answered a malformed "
                                  f"matrix ({type(error).__name__}: {error})") from None
        return body

    async def _has_recorded(self, session: aiohttp.ClientSession, now: float,
                            warnings: list[str]) -> bool:
        """Whether Prometheus holds the recording rules' series of this session and cluster
        now: one instant query, remembered for RECORDED_CHECK_S (a failed one is not)."""
        until, present = self._recorded
        if until <= now:
            check = f"group({named(record_name(PRESENCE_PART), *self.filters)})"
            present = bool(await self._query(session, "query", {"query": check,
                                                                "time": f"{now:.3f}"}, "vector",
                                             warnings))
            self._recorded = (now + RECORDED_CHECK_S, present)
        return present

    async def _query_range(self, session: aiohttp.ClientSession, expr: str, start: int,
                           end: int, step: int, warnings: list[str]) -> list[dict[str, Any]]:
        form = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
        return await self._query(session, "query_range", form, "matrix", warnings)

    async def _query(self, session: aiohttp.ClientSession, path: str, form: dict[str, str],
                     result_type: str, warnings: list[str]) -> list[dict[str, Any]]:
        """The query's result; the warnings Prometheus gives with it are added to
        `warnings`."""
        url = f"{self.settings.url}/api/v1/{path}"
        async with self._slots, session.post(url, data=form) as reply:
            try:
                raw = await read_at_most(reply, MAX_ANSWER_BYTES)
            except BodyTooLarge:
                raise PrometheusError(f"{self.where} answered more than "
                                      f"{MAX_ANSWER_BYTES // 2**20} MiB") from None
            try:
                doc = json.loads(raw)
            except ValueError:
                raise PrometheusError(f"{self.where} answered HTTP "
                                      f"{reply.status} that is not JSON") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            detail = doc.get("error", "") if isinstance(doc, dict) else ""
            raise PrometheusError(f"{self.where} refused a query (HTTP "
                                  f"{reply.status}): {str(detail)[:300]}")
        data = doc.get("data")
        kind = data.get("resultType") if isinstance(data, dict) else None
        if kind != result_type:
            raise PrometheusError(f"{self.where} answered a "
                                  f"{str(kind)[:40]!r}, not a {result_type}")
        given = doc.get("warnings")
        if isinstance(given, list):
            warnings.extend(str(w)[:300] for w in given[:MAX_WARNINGS])
        result = data.get("result") or []
        if not isinstance(result, list):
            raise PrometheusError(f"{self.where} answered a {result_type} "
                                  "that is not a list")
        return result


def on_grid(entry: Mapping[str, Any], start: int, step: int,
             count: int) -> list[float | None]:
    """One matrix entry's values on the grid; NaN and infinities are not values."""
    values: list[float | None] = [None] * count
    for at, text in entry.get("values", ()):
        offset = (float(at) - start) / step
        value = float(text)
        if math.isfinite(offset) and 0 <= (slot := round(offset)) < count \
                and math.isfinite(value):
            values[slot] = value
    return values


# The keys of a Prometheus answer's body (`PrometheusHistory`) that are not one series each.
_ANSWER_FACTS = frozenset({"timestamps", "step_s", "recorded", "devices"})


def _holds_values(body: Mapping[str, Any]) -> bool:
    """Whether any series of a Prometheus answer has a value (a node's devices included)."""
    series = [v for k, v in body.items() if k not in _ANSWER_FACTS]
    series += [v for device in body.get("devices", {}).values() for v in device.values()]
    return any(value is not None for values in series for value in values)


def _failed(task: asyncio.Task) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


@dataclass
class _Cached:
    expires: float
    answer: asyncio.Task


class TabHistory:
    """The series the tab shows: Prometheus when configured and answering, else in-memory.

    Every answer says its `source` ("prometheus" or "memory") and `error` (why
    Prometheus was not used: "" when it was, or when none is configured). With a
    `session_source`, the series follow the cluster's Ray session as it asks it every
    SESSION_CHECK_S (a cluster restarted under the head starts a new one), and come from
    memory while the session is not known: unscoped, Prometheus would add up every
    session's series.
    """

    def __init__(self, memory: Callable[[], History],
                 devices_of: Callable[[str], list[str]],
                 prometheus: PrometheusHistory | None = None, config_error: str = "",
                 retry_after_s: float = DEFAULT_RETRY_AFTER_S,
                 clock: Callable[[], float] = time.time,
                 session_source: SessionSource | None = None) -> None:
        self._memory = memory
        self._devices_of = devices_of
        self.prometheus = prometheus
        self.config_error = config_error
        self.retry_after_s = retry_after_s
        self._clock = clock
        self._cache: dict[tuple[Scope, str], _Cached] = {}
        self._failure = ""
        self._failed_at = -math.inf
        self._session_source = session_source
        self._session_asked_until = -math.inf

    @property
    def source(self) -> str:
        """Where series come from when all is well."""
        return "prometheus" if self.prometheus is not None else "memory"

    async def series(self, scope: Scope, range_name: str) -> dict[str, Any]:
        """The scope's series over `range_name` (a key of RANGES)."""
        if range_name not in RANGES:
            raise ValueError(f"range must be one of {', '.join(RANGES)}, got {range_name!r}")
        meta = {"range": range_name, "range_s": RANGES[range_name], "scope": scope.kind,
                **({"key": scope.key} if scope.key else {})}
        error = self.config_error
        if self.prometheus is not None:
            now = self._clock()
            unknown = await self._follow_session(now)
            if unknown:
                error = unknown
            elif now - self._failed_at < self.retry_after_s:
                error = self._failure
            else:
                try:
                    body = await self._cached(scope, range_name, now)
                except PrometheusError as failure:
                    self._failure, self._failed_at = str(failure), self._clock()
                    error = self._failure
                else:
                    if _holds_values(body):
                        return {**meta, "source": "prometheus", "error": "",
                                "prometheus_url": self.prometheus.settings.shown_url, **body}
                    error = self._none_held()
        history = self._memory()
        return {**meta, "source": "memory", "error": error, "recorded": False,
                **memory_series(history, scope.kind, scope.key, self._devices_of(scope.key)
                                if scope.kind == "node" else ())}

    async def _follow_session(self, now: float) -> str:
        """Asks the session source when due and scopes to a new session; why Prometheus
        cannot be used while the session is unknown, else ""."""
        if self._session_source is None:
            return ""
        if now >= self._session_asked_until:
            self._session_asked_until = now + SESSION_RETRY_S  # one lookup at a time
            session = await self._session_source()
            if session:
                self._session_asked_until = now + SESSION_CHECK_S
            if session and session != self.prometheus.settings.session_name:
                self.prometheus.scope_to_session(session)
                self._cache.clear()
                self._failed_at = -math.inf
        if self.prometheus.settings.session_name:
            return ""
        return (f"{self.prometheus.where} is not asked: the Ray session is not known yet (the "
                "GCS did not answer), and without it every session's series would be added "
                "up")

    def _none_held(self) -> str:
        settings = self.prometheus.settings
        scoped = ", ".join(f"{label}={value!r}" for label, value in (
            ("SessionName", settings.session_name), ("ray_io_cluster", settings.cluster)) if value)
        return (f"{self.prometheus.where} holds none of these series over the range"
                + (f" (scoped to {scoped})" if scoped else ""))

    async def _cached(self, scope: Scope, range_name: str, now: float) -> dict[str, Any]:
        key = (scope, range_name)
        cached = self._cache.get(key)
        if cached is None or cached.expires <= now or _failed(cached.answer):
            step = step_for(RANGES[range_name], self.prometheus.max_points)
            if len(self._cache) >= MAX_CACHED:
                for old in [k for k, c in self._cache.items() if c.expires <= now] or [
                        next(iter(self._cache))]:
                    del self._cache[old]
            cached = self._cache[key] = _Cached(
                now + min(step, MAX_CACHE_S),
                asyncio.ensure_future(self.prometheus.series(scope, range_name, now)))
        return await asyncio.shield(cached.answer)
