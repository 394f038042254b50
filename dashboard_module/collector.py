"""Finds every node's agent, pulls their summaries in the background, keeps the latest view.

Each refresh round lists the live agents (from the GCS registry, or any
`discover` callable) and fetches every agent's compact summary
(`/api/v1/summary`) with a conditional request (`If-None-Match`: an unchanged
node answers 304 with no body), each at a stable offset of its own within the
first `spread` of the refresh interval, so a round is a steady trickle rather
than one burst. An agent without the summary endpoint (404: an older release)
is asked for its full snapshot instead. Nodes never asked before are paced
(new_nodes.py): a fresh head beside 10,000 agents fills its view over a few
rounds of about the refresh each, at the rate it parses new summaries, the rest
`waiting`, and lists the whole cluster at once. The parts of the view of nodes
that answered are made while the round's fetches run; the view is then built,
reusing the per-node work of every node that did not change. A node whose agent fails keeps
its last data, marked unreachable. Agents that do not answer cost the round only
their own places (fetch_places.py): once silent, they are asked outside the places
the others use, until the round's end. The node page's full snapshot is fetched on
demand (`node_detail`, dashboard_module/node_detail.py). API requests read
`collector.view` only: a slow agent never delays a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..exporter.agent_client import client_ssl_context, client_token
from ..exporter.background import BackgroundTask
from ..exporter.node_view import (
    NOW_HEADER,
    TAKEN_AT_HEADER,
    NotASnapshot,
    reduce_snapshot,
    reduce_summary,
)
from ..exporter.web_auth import auth_headers
from .agent_connections import AgentConnections, AnswerTooLarge, Reply
from .aggregate import (
    ClusterView,
    NodePart,
    NodeState,
    build_view,
    empty_view,
    history_values,
    prepare_parts,
)
from .batch_parse import BatchParser
from .bounded_read import BodyTooLarge, read_at_most
from .fetch_places import FetchPlaces, NotAsked, quiet_places
from .heatmap_columns import columns_body, columns_gzip
from .history import History
from .json_decode import decode
from .new_nodes import NewNodes
from .node_detail import DETAIL_MAX_IN_FLIGHT, NodeDetails
from .round_gc import RoundCollection
from .transfers_view import LastKnownDevices

log = logging.getLogger(__name__)

DEFAULT_REFRESH_S = 5.0
DEFAULT_FETCH_TIMEOUT_S = 3.0
DEFAULT_HISTORY_S = 600.0
MAX_IN_FLIGHT = 64
MAX_SNAPSHOT_BYTES = 64 * 2**20
# Fetches start within this share of the refresh interval, leaving the rest for slow
# answers and the view's rebuild.
DEFAULT_SPREAD = 0.6
# The requests to agents that did not answer their last end by this share of the refresh
# interval (fetch_places.py): however many stay silent, a round ends in its interval.
ROUND_END_SHARE = 0.8
# Nodes never asked before are asked while fewer of their fetches than this many times
# `max_in_flight` are unfinished (what waits on the parsing thread: about a quarter of a
# second of its work at the default).
NEW_NODES_BACKLOG = 4
# An agent without the summary is asked again this many rounds later (upgraded in place).
SUMMARY_RETRY_ROUNDS = 60
# A round's fetches start at their offsets to within this.
START_STEP_S = 0.005
# The interpreter's switch interval while a view is built (its default is 5 ms).
BUILD_SWITCH_INTERVAL_S = 0.0005
# An agent's clock further off the head's than this (its answer's time against the
# head's when it came, the network's delay and the head's own lag included) moves the
# agent's sample times onto the head's clock; nearer, they are taken as they are.
CLOCK_TOLERANCE_S = 1.0
# An offset beyond this (a year) is taken as a broken header, not a clock that is off.
MOST_CLOCK_OFFSET_S = 366 * 86400.0
# The least pause between two rounds.
MIN_PAUSE_S = 0.2
# While a round's fetches run, the parts of the nodes that answered are made this often.
PREPARE_EVERY_S = 0.25


@dataclass(frozen=True)
class AgentTarget:
    """Where one node's agent serves."""

    node_id: str
    url: str
    hostname: str = ""
    node_ip: str = ""
    simulated: bool = False


Discover = Callable[[], Awaitable[Sequence[AgentTarget]]]


def registry_discovery(gcs_address: str) -> Discover:
    """The agents of the cluster's GCS registry (exporter/cluster/registry.py) the view
    follows: those heart-beating, and those that stopped on a node that is still alive."""
    from ..exporter.cluster.gcs import ClusterGcs
    from ..exporter.cluster.registry import AgentRegistry

    registry = AgentRegistry(ClusterGcs(gcs_address))

    async def discover() -> list[AgentTarget]:
        records = await asyncio.to_thread(registry.watched)
        return [AgentTarget(r.node_id, r.url, r.hostname, r.node_ip, r.simulated)
                for r in records]

    return discover


def _reduced(body: bytes) -> dict[str, Any]:
    return reduce_snapshot(decode(body))


def _reduced_summary(body: bytes) -> dict[str, Any]:
    return reduce_summary(decode(body))


def start_offset(node_id: str, window_s: float) -> float:
    """Node `node_id`'s stable delay within a round of `window_s` (spread evenly by hash)."""
    if window_s <= 0:
        return 0.0
    digest = hashlib.blake2b(node_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * window_s


def start_order(nodes: Sequence[NodeState], window_s: float) -> list[tuple[float, NodeState]]:
    """When in a round (seconds in) each node's fetch starts, in that order: each at its own
    stable offset, but the agents that did not answer their last request spread evenly
    over the window in the order they were last asked, the longest ago first."""
    silent = sorted((n for n in nodes if n.silent), key=lambda n: n.asked_round)
    step = window_s / len(silent) if silent else 0.0
    starts = [(step * rank, n) for rank, n in enumerate(silent)]
    starts += [(start_offset(n.node_id, window_s), n) for n in nodes if not n.silent]
    return sorted(starts, key=lambda start: start[0])


@dataclass
class RoundStats:
    """What one round asked and got."""

    requests: int = 0
    not_modified: int = 0  # 304 answers
    summaries: int = 0  # 200 summaries
    snapshots: int = 0  # full snapshots (agents without a summary)
    failures: int = 0
    body_bytes: int = 0  # response bodies read
    rebuilt_nodes: int = 0  # nodes whose share of the view was recomputed
    deferred: int = 0  # nodes never asked before, left for a later round (the head was busy)
    quiet: int = 0  # requests that waited on an agent in a quiet place (fetch_places.py)
    not_asked: int = 0  # silent agents left for a later round: no quiet place came free


class Collector:
    """Background refresh of every agent's summary, and the aggregated view."""

    def __init__(self, discover: Discover, refresh_s: float = DEFAULT_REFRESH_S,
                 fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S,
                 history_s: float = DEFAULT_HISTORY_S, max_in_flight: int = MAX_IN_FLIGHT,
                 token: Callable[[], str | None] = client_token,
                 spread: float = DEFAULT_SPREAD, gzip_columns: bool = True,
                 quiet_in_flight: int | None = None) -> None:
        """`token` gives the token presented to agents (default: Ray's cluster token);
        `spread` is the share of the refresh interval the round's fetches start within;
        `gzip_columns`: each view's columns form is gzipped too, for the API to send;
        `quiet_in_flight`: how many requests may wait on agents that do not answer
        (default: `fetch_places.quiet_places`)."""
        if not 0.0 <= spread < 1.0:
            raise ValueError(f"spread must be at least 0 and below 1, got {spread}")
        self.discover = discover
        self.token = token
        self.gzip_columns = gzip_columns
        self.refresh_s = refresh_s
        self.fetch_timeout_s = fetch_timeout_s
        self.max_in_flight = max_in_flight
        self.quiet_in_flight = quiet_places(max_in_flight) if quiet_in_flight is None \
            else quiet_in_flight
        self.spread = spread
        self.history = History(max(int(history_s / refresh_s), 1))
        self.nodes: dict[str, NodeState] = {}
        self.view: ClusterView = empty_view(refresh_s)
        self.rounds = 0
        self.last_round_at: float | None = None
        self.last_round_duration_s: float | None = None
        self.last_round: RoundStats = RoundStats()
        self.round_in_progress: RoundStats | None = None  # what the running round did so far
        self.discovery_error = ""
        self.details = NodeDetails(self.fetch_full)
        self._parts: dict[str, NodePart] = {}
        self._transfer_devices = LastKnownDevices()  # what aborted transfers' actors held
        self._session: aiohttp.ClientSession | None = None
        self._connections: AgentConnections | None = None
        self._refreshing = BackgroundTask("ray-accel-dashboard-refresh", self._loop)
        self._parser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-accel-parse")
        # the rounds' answers, many per hand-over, the event loop let in between two
        self._batches = BatchParser(self._parser, pause=_let_the_loop_run)
        # The node page's snapshots are parsed beside the rounds, never queued behind them.
        self._detail_parser = ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="ray-accel-detail")
        self._collection = RoundCollection()  # the view's objects out of the GC's walks
        self._arrived: list[NodeState] = []  # nodes with new data whose parts are not made
        self.provisional_views = 0  # views published while a round's fetches still ran

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Start refreshing in the background (the first round starts at once)."""
        self._refreshing.start()

    async def stop(self) -> None:
        await self._refreshing.stop()
        self._collection.release()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._connections is not None:
            self._connections.close()
            self._connections = None

    async def _loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.refresh()
            except Exception:  # keep refreshing whatever one round did
                log.exception("refresh round failed")
            await asyncio.sleep(self.pause_after(time.monotonic() - started))

    def pause_after(self, round_s: float) -> float:
        """Seconds to wait after a round of `round_s` before the next: the rest of the
        refresh interval, MIN_PAUSE_S at least; only MIN_PAUSE_S while the last round left
        nodes never asked (the start-up: the head has work queued, not time to spare)."""
        if self.last_round.deferred:
            return MIN_PAUSE_S
        return max(self.refresh_s - round_s, MIN_PAUSE_S)

    def session(self) -> aiohttp.ClientSession:
        """The HTTP session to the agents (made on first use)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self.max_in_flight + self.quiet_in_flight + DETAIL_MAX_IN_FLIGHT,
                    ssl=client_ssl_context()),
                timeout=aiohttp.ClientTimeout(total=self.fetch_timeout_s),
                headers=auth_headers(self.token()))
        return self._session

    def connections(self) -> AgentConnections:
        """The kept-alive connections the rounds' summary requests go over (made on first
        use, with the session's headers and TLS verification)."""
        if self._connections is None:
            self._connections = AgentConnections(auth_headers(self.token()), client_ssl_context)
        return self._connections

    # -- one round -------------------------------------------------------------------------
    async def refresh(self) -> ClusterView:
        """Discover, fetch every agent's summary (spread over the interval), rebuild the view."""
        started = time.monotonic()
        try:
            targets = list(await self.discover())
            self.discovery_error = ""
        except Exception as error:  # the GCS away: keep the nodes known so far
            message = f"cannot list the agents: {error}"
            if message != self.discovery_error:  # log changes only
                log.warning("%s", message)
            self.discovery_error = message
            targets = None
        if targets is not None:
            self._track(targets)
        self.session()
        self.connections()
        stats = self.round_in_progress = RoundStats()
        kept = dict(self._parts)
        nodes = list(self.nodes.values())
        try:
            await self._while_building(self._fetch_spread(nodes, stats), nodes)
        finally:
            self.round_in_progress = None
        view = await asyncio.get_running_loop().run_in_executor(
            self._parser, self._build, nodes)
        stats.rebuilt_nodes = sum(1 for k, p in self._parts.items() if kept.get(k) is not p)
        self.history.publish()  # the round staged with the view, shown with it
        self.view = view
        self.rounds += 1
        self.last_round = stats
        self.last_round_at = view.generated_at
        self.last_round_duration_s = time.monotonic() - started
        self._collection.after_round(len(nodes))
        return view

    async def _while_building(self, fetching: Awaitable[None], nodes: list[NodeState]) -> None:
        """Await `fetching` (the round's fetches) while the parsing thread makes the parts of
        the nodes that answered, every PREPARE_EVERY_S. In a round with nodes the view does
        not show yet (the head's first), it also publishes the view so far at once and every
        refresh interval, those nodes `waiting` until they answer, so the tab shows the
        cluster from the start."""
        shown = self.view.nodes
        publish = any(node.node_id not in shown for node in nodes)
        building = asyncio.ensure_future(self._build_arrivals(nodes, publish))
        try:
            await fetching
        finally:
            building.cancel()
            await asyncio.wait([building])  # (a build it started ends in the parsing thread)
            if not building.cancelled() and building.exception() is not None:
                log.error("building the parts of a round's answers failed",
                          exc_info=building.exception())
        self._arrived.clear()  # the round's build makes what is left

    async def _build_arrivals(self, nodes: list[NodeState], publish: bool) -> None:
        loop = asyncio.get_running_loop()
        published = -math.inf
        while True:
            if publish and time.monotonic() - published >= self.refresh_s:
                published = time.monotonic()
                self._arrived.clear()  # the view's build makes their parts
                self.view = await loop.run_in_executor(self._parser, self._build_provisional,
                                                       nodes)
                self.provisional_views += 1
            elif self._arrived:
                arrived, self._arrived = self._arrived, []
                await loop.run_in_executor(self._parser, self._prepare, arrived)
            await asyncio.sleep(PREPARE_EVERY_S)

    def _prepare(self, arrived: list[NodeState]) -> None:
        with _handing_over_often():
            prepare_parts(arrived, self.refresh_s, self._parts, None, _let_the_loop_run)

    def _build_provisional(self, nodes: list[NodeState]) -> ClusterView:
        """The view of the nodes so far (no history: that is the rounds'), its columns form
        encoded (and gzipped), in the parsing thread."""
        with _handing_over_often():
            view = build_view(nodes, self.refresh_s, None, self._parts, _let_the_loop_run,
                              self._transfer_devices)
            self._encode_columns(view)
        return view

    def _build(self, nodes: list[NodeState]) -> ClusterView:
        """The round's view, its history staged and its heatmap's columns form encoded (in
        the parsing thread: none of it waits on the event loop, nor holds it up; the
        per-node form is written from the rows each node's part encoded; the columns form
        is gzipped here too, for the clients that accept it)."""
        with _handing_over_often():
            view = build_view(nodes, self.refresh_s, None, self._parts, _let_the_loop_run,
                              self._transfer_devices)
            self.history.stage(view.generated_at, history_values(view), _let_the_loop_run)
            self._encode_columns(view)
        return view

    def _encode_columns(self, view: ClusterView) -> None:
        (columns_gzip if self.gzip_columns else columns_body)(view, _let_the_loop_run)

    def _track(self, targets: Sequence[AgentTarget]) -> None:
        wanted = {t.node_id: t for t in targets if t.node_id}
        changed = False
        for node_id in list(self.nodes):
            if node_id not in wanted:
                del self.nodes[node_id]  # deregistered, or its node left the cluster
                changed = True
        for node_id, target in wanted.items():
            node = self.nodes.get(node_id)
            if node is None or node.url != target.url:
                self.nodes[node_id] = NodeState(node_id, target.url, target.hostname,
                                                target.node_ip, target.simulated)
                changed = True
            else:
                node.hostname, node.node_ip = target.hostname, target.node_ip
        if changed and self._connections is not None:
            # Nodes come and go (autoscaling, spot instances): what the connections keep
            # for agents gone would grow for as long as the head runs.
            self._connections.keep_only(_summary_url(n) for n in self.nodes.values())

    async def _fetch_spread(self, nodes: list[NodeState], stats: RoundStats) -> None:
        """Fetch every node's answer, each started at its offset within the spread window.

        One loop starts them in offset order, sleeping only when the next is more than
        START_STEP_S away (one timer per step, not one per node: at 10,000 nodes a
        tenth of the event loop's work was the nodes' own timers). Nodes never asked
        before are paced (new_nodes.py): at most NEW_NODES_BACKLOG times `max_in_flight`
        of their fetches unfinished, the rest started as those finish, until the end of
        the spread window; what is left then waits for the next round. Agents that did not
        answer their last request start in the order they were last asked, the longest ago
        first: they wait for the places kept for them in that order (fetch_places.py), so
        none is left out round after round."""
        window = self.refresh_s * self.spread
        begun = time.monotonic()
        places = FetchPlaces(self.max_in_flight, self.quiet_in_flight, self.fetch_timeout_s,
                             begun + self.refresh_s * ROUND_END_SHARE)
        loop = asyncio.get_running_loop()
        started: list[asyncio.Task[None]] = []
        new = NewNodes(lambda node: loop.create_task(self._fetch(node, places, stats)),
                       NEW_NODES_BACKLOG * self.max_in_flight, self.max_in_flight,
                       begun + window if window > 0 else None)
        try:
            for offset, node in start_order(nodes, window):
                wait = begun + offset - time.monotonic()
                if wait > START_STEP_S:
                    await asyncio.sleep(wait)
                if node.fetch_duration_s is None:  # never asked
                    new.offer(node)
                else:
                    started.append(loop.create_task(self._fetch(node, places, stats)))
            await new.settle()
            stats.deferred = new.deferred
            await asyncio.gather(*started, *new.started)
            stats.quiet = places.quiet_requests
        except BaseException:  # the round cancelled (the collector stops): so are its fetches
            for task in (*started, *new.started):
                task.cancel()
            raise

    async def _fetch(self, node: NodeState, places: FetchPlaces, stats: RoundStats) -> None:
        """Node `node`'s answer, its request in one of the round's `places`; the parsing of
        what it brings waits outside them, so that requests go on while the parsing thread
        is busy (held, their answers stalled the parsing thread between two batches)."""
        started = time.monotonic()
        stats.requests += 1
        if node.has_summary is False and \
                self.rounds - node.summary_missing_round >= SUMMARY_RETRY_ROUNDS:
            node.has_summary = None
        silent = False
        try:
            if node.has_summary is not False:
                await self._fetch_summary(node, stats, places)
            if node.has_summary is False:
                await self._fetch_snapshot(node, stats, places)
        except NotAsked:
            stats.not_asked += 1
            return  # it keeps what the head knew of it: its data and its error
        except TimeoutError as error:
            node.error, silent = str(error) or "no answer in time", True
        except (aiohttp.ClientError, OSError) as error:
            node.error = f"{type(error).__name__}: {error}" if str(error) else \
                type(error).__name__
        except (NotASnapshot, ValueError) as error:
            node.error = f"bad snapshot: {error}"
        else:
            node.error, node.fetched_at = "", time.time()
        if node.error:
            stats.failures += 1
        node.silent, node.asked_round = silent, self.rounds
        node.fetch_duration_s = time.monotonic() - started

    async def _fetch_summary(self, node: NodeState, stats: RoundStats,
                             places: FetchPlaces) -> None:
        """The node's summary; 304 keeps its data and only refreshes its time."""
        held = node.data is not None and node.etag
        headers = {"If-None-Match": node.etag} if held else {}
        url = _summary_url(node)
        try:
            reply = await places.run(lambda timeout_s: self.connections().get(
                url, headers, timeout_s, MAX_SNAPSHOT_BYTES), node.silent)
        except AnswerTooLarge as error:
            raise NotASnapshot(str(error)) from None
        if reply.status == 404:  # an agent older than the summary
            node.has_summary, node.summary_missing_round = False, self.rounds
            return
        if reply.status not in (200, 304) or (reply.status == 304 and not held):
            raise NotASnapshot(f"HTTP {reply.status}")  # e.g. 401: a token it refuses
        taken_at = _on_head_clock(_taken_at(reply), reply, time.time())
        if reply.status == 304:
            stats.not_modified += 1
            node.data["taken_at"] = taken_at
            return
        body, etag = reply.body, reply.header("ETag")
        stats.summaries += 1
        stats.body_bytes += len(body)
        data = await self._batches.parse(_reduced_summary, body)
        data["taken_at"] = taken_at
        node.has_summary = True
        self._replace_data(node, data, etag, detailed=False)
        self._arrived.append(node)
        self._collection.kept(len(self.nodes))

    async def _snapshot_body(self, node: NodeState, timeout_s: float | None = None) -> bytes:
        """Node `node`'s full snapshot, within `timeout_s` if given (the session's else)."""
        async with asyncio.timeout(timeout_s), \
                self.session().get(node.url.rstrip("/") + "/api/v1/snapshot") as reply:
            if reply.status != 200:
                raise NotASnapshot(f"HTTP {reply.status}")
            try:
                return await read_at_most(reply, MAX_SNAPSHOT_BYTES)
            except BodyTooLarge as error:
                raise NotASnapshot(f"snapshot {error}") from None

    async def fetch_full(self, node: NodeState) -> dict[str, Any]:
        """Node `node`'s full snapshot, reduced (the node page's detail, on demand)."""
        body = await self._snapshot_body(node)
        data = await asyncio.get_running_loop().run_in_executor(self._detail_parser, _reduced,
                                                                body)
        _own_node(node, data)
        return data

    async def _fetch_snapshot(self, node: NodeState, stats: RoundStats,
                              places: FetchPlaces) -> None:
        body = await places.run(lambda timeout_s: self._snapshot_body(node, timeout_s),
                                node.silent)
        stats.snapshots += 1
        stats.body_bytes += len(body)
        # Parsed off the event loop (a 1000-node round would block it for seconds), one
        # at a time: more parsing threads would only take the GIL from the loop more often.
        data = await self._batches.parse(_reduced, body)
        self._replace_data(node, data, "", detailed=True)
        self._arrived.append(node)
        self._collection.kept(len(self.nodes))

    @staticmethod
    def _replace_data(node: NodeState, data: dict[str, Any], etag: str, detailed: bool) -> None:
        _own_node(node, data)
        node.data, node.etag, node.detailed = data, etag, detailed
        node.data_version += 1

    def inject(self, node: NodeState) -> None:
        """Add a node with data already fetched (tests and benchmarks)."""
        self.nodes[node.node_id] = node


@contextlib.contextmanager
def _handing_over_often() -> Iterator[None]:
    """While a view or its parts are built, the interpreter hands the GIL over more often,
    so the event loop's thread waits less between its turns."""
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(BUILD_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(switch_interval)


def _let_the_loop_run() -> None:
    """Hand the GIL to the event loop's thread if it waits for it: without this a long
    rebuild in the parsing thread holds it for up to the interpreter's switch interval
    (5 ms) at each of the loop's turns, which a request needs several of."""
    time.sleep(0)


def _own_node(node: NodeState, data: dict[str, Any]) -> None:
    """Takes `data` as node `node`'s (an agent without Ray names no node); `NotASnapshot`
    where the agent at the node's URL answers for another node: a loopback URL registered
    by an agent on another host reaches the head's own agent, an address reused by a new
    node reaches that node's, and its devices must not be shown as this node's."""
    answered = data["node_id"]
    if answered and answered != node.node_id:
        raise NotASnapshot(f"the agent at {node.url} answers for node {answered[:16]}, "
                           "not this one (an address registered by another host, or reused)")
    data["node_id"] = node.node_id


def _summary_url(node: NodeState) -> str:
    return node.url.rstrip("/") + "/api/v1/summary"


def _on_head_clock(taken_at: float, reply: Reply, received_at: float) -> float:
    """`taken_at` (the agent's clock) on the head's clock: moved by how far the agent's
    clock was off when it answered (`NOW_HEADER` against `received_at`), where that is
    beyond CLOCK_TOLERANCE_S (and within MOST_CLOCK_OFFSET_S: a time further off is no
    clock's). An answer without the agent's time is taken as it is, but never after
    `received_at`. `NotASnapshot` for a sample time after the agent's own answer time."""
    try:
        agent_now = float(reply.header(NOW_HEADER))
    except ValueError:
        return min(taken_at, received_at)
    if taken_at > agent_now + CLOCK_TOLERANCE_S:
        raise NotASnapshot(f"the summary's {TAKEN_AT_HEADER} is after its {NOW_HEADER}")
    offset = received_at - agent_now
    if math.isfinite(offset) and CLOCK_TOLERANCE_S < abs(offset) <= MOST_CLOCK_OFFSET_S:
        taken_at += offset
    return min(taken_at, received_at)


def _taken_at(reply: Reply) -> float:
    text = reply.header(TAKEN_AT_HEADER)
    try:
        taken_at = float(text)
    except ValueError:
        taken_at = math.nan
    if not math.isfinite(taken_at):
        raise NotASnapshot(f"the summary has no valid {TAKEN_AT_HEADER} header: {text[:40]!r}")
    return taken_at
