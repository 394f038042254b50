"""The per-node agent: backends, the sampling loop and the HTTP server, wired together."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version

from .attribution.guard import TaskIdGuard
from .backends import Backend, load_backends
from .collective import CollectiveStallDetector, CollectiveStallSettings
from .config import AgentConfig
from .exposure import Exposure
from .extensions import AgentExtension, configured_extensions
from .httpd import Serving, serve
from .record.history import History
from .sampler import Sampler
from .server import AgentHttp
from .simulation_marker import simulated_environment
from .store import SnapshotStore

log = logging.getLogger(__name__)

UNKNOWN_VERSION = "unknown"  # the package's metadata is not installed (a source tree)


def agent_version() -> str:
    try:
        return version("ray-accel")
    except PackageNotFoundError:
        return UNKNOWN_VERSION


class Agent:
    """Runs sampling in the background and serves its snapshots over HTTP."""

    def __init__(self, config: AgentConfig, backends: Sequence[Backend] | None = None,
                 extensions: Sequence[AgentExtension] | None = None) -> None:
        self.config = config
        self.simulation = None
        self._recording_end: asyncio.TimerHandle | None = None
        # ExposureError when unusable
        self.exposure = Exposure(config.host, config.exposure, config.deployed)
        node_labels = dict(config.node_labels)
        facts = {"version": agent_version(), "interval_seconds": f"{config.interval_s:g}",
                 "scenario": ""}
        if config.simulate:
            from .simulate import SimulatedHardware

            self.simulation = SimulatedHardware.start(config.simulate)
            facts["scenario"] = self.simulation.scenario_name
        try:
            if self.simulation is not None:
                self.simulation.activate()
            self._build(config, backends, extensions, node_labels, facts)
        except BaseException:
            self.release_simulation()
            raise

    def _build(self, config: AgentConfig, backends: Sequence[Backend] | None,
               extensions: Sequence[AgentExtension] | None, node_labels: dict[str, str],
               facts: dict[str, str]) -> None:
        if config.simulate or simulated_environment():
            node_labels["simulated"] = "true"
        self.store = SnapshotStore()
        self.history = History()  # served as a scenario at /api/v1/record
        self.store.subscribe(self.history.add)
        self.attribution = self._attribution_refresher(config)
        self.sampler = Sampler(
            backends if backends is not None else load_backends(config.backends),
            self.store, interval_s=config.interval_s, node_labels=node_labels,
            agent_facts=facts, retry_s=config.retry_s,
            slow_read_interval_s=config.slow_read_interval_s,
            attribution=(lambda: self.attribution.latest) if self.attribution else None,
            collective=CollectiveStallDetector(CollectiveStallSettings(
                config.collective_window_s, config.collective_busy_utilization,
                config.collective_flat_bytes_per_s)),
        )
        self.extensions: list[AgentExtension] = list(
            configured_extensions(config) if extensions is None else extensions
        )
        self._serving: Serving | None = None
        self.port: int | None = None

    @staticmethod
    def _attribution_refresher(config: AgentConfig):
        if not config.ray:
            return None
        from .attribution.ray_sources import RaySources
        from .attribution.refresher import AttributionRefresher, TransferSettings

        return AttributionRefresher(
            lambda: RaySources.discover(config.ray_address, config.ray_node_id),
            interval_s=config.attribution_interval_s,
            guard=TaskIdGuard(cap=config.task_id_cap),
            names=config.names,
            transfers=TransferSettings(config.transfers, config.transfer_stall_after_s,
                                       config.transfer_report_after_s, config.transfer_pairing),
        )

    @property
    def scheme(self) -> str:
        return self.exposure.scheme

    @property
    def node_labels(self) -> Mapping[str, str]:
        return self.sampler.node_labels

    @property
    def facts(self) -> Mapping[str, str]:
        return self.sampler.agent_facts

    @property
    def url(self) -> str:
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        return f"{self.exposure.scheme}://{shown}:{self.port}"

    async def start(self) -> None:
        """Start sampling and listening; returns once the server accepts connections."""
        if self.attribution is not None:
            self.attribution.start()
        self.sampler.start()
        self._say_when_recording_ends()
        http = AgentHttp(self.store, lambda: self.sampler.alive, history=self.history)
        await self.exposure.start()
        self._serving = await serve(self.exposure.guard(http.app()), self.config.host,
                                    self.config.port, self.config.limits,
                                    self.exposure.ssl_context)
        self.port = self._serving.port
        for extension in self.extensions:
            await extension.start(self)

    def _say_when_recording_ends(self) -> None:
        """Where the simulated node replays a recording, say where it ends, and say it again
        when the replay gets there: past it the values only hold."""
        simulation = self.simulation
        scenario = simulation.scenario if simulation is not None else {}
        until = scenario.get("recorded_until_s")
        if simulation is None or until is None or scenario.get("freeze_at_s") is not None:
            return
        log.info("replaying %s, a recording that ends at t = %g s", simulation.scenario_name,
                 until)
        self._recording_end = asyncio.get_running_loop().call_later(
            max(until - simulation.elapsed_s(), 0.0), log.warning,
            "the recording %s has ended (t = %g s): from here on its values hold their last "
            "and its counters count on at their last rate", simulation.scenario_name, until)

    async def stop(self) -> None:
        """Stop serving and sampling, and remove the simulated hardware this agent started.

        Safe to call after a failed or partial `start`.
        """
        try:
            await self._stop_running()
        finally:
            self.release_simulation()

    async def _stop_running(self) -> None:
        if self._recording_end is not None:
            self._recording_end.cancel()
        for extension in reversed(self.extensions):
            try:
                await extension.stop()
            except Exception:  # one extension must not keep the agent from stopping
                log.exception("stopping %s failed", type(extension).__name__)
        if self._serving is not None:
            await self._serving.close()
            self._serving = None
        await self.exposure.stop()
        await asyncio.to_thread(self.sampler.stop)
        if self.attribution is not None:
            await asyncio.to_thread(self.attribution.stop)

    def release_simulation(self) -> None:
        """Remove the simulated hardware (its temporary folder) this agent started, if any."""
        simulation, self.simulation = self.simulation, None
        if simulation is not None:
            simulation.close()


async def serve_forever(agent: Agent) -> None:
    """Run the agent until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await agent.start()
        # What starting built (modules, the catalog, the server) lives as long as the
        # process: kept out of the collector's full passes, which otherwise walk all of it
        # (a tenth of a millisecond a cycle at 1 s on an 8-GPU node).
        gc.freeze()
        log.info("ray-accel agent on %s (host %s): %s", agent.url, socket.gethostname(),
                 agent.exposure.describe())
        print(f"ray-accel agent serving {agent.url}/metrics", flush=True)
        await stop.wait()
    finally:
        await agent.stop()
