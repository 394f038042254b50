"""The per-node agent: backends, the sampling loop and the HTTP server, wired together."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

from .attribution.guard import DEFAULT_TASK_ID_CAP, TaskIdGuard
from .attribution.transfers import DEFAULT_REPORT_AFTER_S, DEFAULT_STALL_AFTER_S
from .backends import Backend, load_backends
from .collective import (
    DEFAULT_BUSY_UTILIZATION,
    DEFAULT_FLAT_BYTES_PER_S,
    DEFAULT_WINDOW_S,
    CollectiveStallDetector,
    CollectiveStallSettings,
)
from .exposure import Exposure, ExposureSettings, guarded_app
from .record.history import History
from .sampler import Sampler
from .server import AgentHttp
from .serving import Serving, ServingLimits, serve
from .store import SnapshotStore

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9478
DEFAULT_INTERVAL_S = 1.0


def agent_version() -> str:
    try:
        return version("ray-accel")
    except PackageNotFoundError:
        return "unknown"


def simulated_environment() -> bool:
    """True when this process inherited simulated hardware (e.g. from a raylet started on it)."""
    from .simulate import STATE_ENV

    return bool(os.environ.get(STATE_ENV))


@dataclass
class AgentConfig:
    """Everything the agent is started with."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    interval_s: float = DEFAULT_INTERVAL_S
    backends: Sequence[str] | None = None
    simulate: str | None = None
    node_labels: dict[str, str] = field(default_factory=dict)
    retry_s: float = 30.0
    ray: bool = True
    ray_address: str | None = None
    ray_node_id: str | None = None
    attribution_interval_s: float = 2.0
    task_id_cap: int = DEFAULT_TASK_ID_CAP
    names: bool = True  # actor classes/names and task names in labels
    # Registration in the Ray cluster's GCS (exporter/cluster/registry.py); 0 turns it off.
    register_interval_s: float = 10.0
    deployed: bool = False  # started by `ray-accel deploy` as a Ray actor
    # OTLP metric export (exporter/sinks/otlp.py): off unless an endpoint is configured
    # here or in the standard OTEL_EXPORTER_OTLP_* environment variables.
    otlp_endpoint: str | None = None
    otlp_protocol: str | None = None
    otlp_interval_s: float | None = None
    # Ray Direct Transport transfers and hung collectives (docs/transfers.md).
    transfers: bool = True
    transfer_stall_after_s: float = DEFAULT_STALL_AFTER_S
    transfer_report_after_s: float = DEFAULT_REPORT_AFTER_S
    transfer_pairing: str = "auto"  # "auto" (on the head node), "always", "never"
    collective_window_s: float = DEFAULT_WINDOW_S
    collective_busy_utilization: float = DEFAULT_BUSY_UTILIZATION
    collective_flat_bytes_per_s: float = DEFAULT_FLAT_BYTES_PER_S
    # Header and idle timeouts, connection cap (exporter/serving.py).
    limits: ServingLimits = field(default_factory=ServingLimits)
    # Token, /metrics auth, TLS and basic auth (exporter/exposure.py).
    exposure: ExposureSettings = field(default_factory=ExposureSettings)


class AgentExtension(Protocol):
    """Something that runs alongside the agent (registration, OTLP export)."""

    async def start(self, agent: Agent) -> None:
        """Called once the HTTP server accepts connections."""

    async def stop(self) -> None:
        """Called before the HTTP server closes."""


class Agent:
    """Runs sampling in the background and serves its snapshots over HTTP."""

    def __init__(self, config: AgentConfig, backends: Sequence[Backend] | None = None,
                 extensions: Sequence[AgentExtension] | None = None) -> None:
        self.config = config
        self.simulation = None
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
        from .extensions import configured_extensions

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
    def url(self) -> str:
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        return f"{self.exposure.scheme}://{shown}:{self.port}"

    async def start(self) -> None:
        """Start sampling and listening; returns once the server accepts connections."""
        if self.attribution is not None:
            self.attribution.start()
        self.sampler.start()
        http = AgentHttp(self.store, lambda: self.sampler.alive, history=self.history)
        await self.exposure.start()
        self._serving = await serve(guarded_app(http.app(), self.exposure), self.config.host,
                                    self.config.port, self.config.limits,
                                    self.exposure.ssl_context)
        self.port = self._serving.port
        for extension in self.extensions:
            await extension.start(self)

    async def stop(self) -> None:
        """Stop serving and sampling, and remove the simulated hardware this agent started.

        Safe to call after a failed or partial `start`.
        """
        try:
            await self._stop_running()
        finally:
            self.release_simulation()

    async def _stop_running(self) -> None:
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
        log.info("ray-accel agent on %s (host %s): %s", agent.url, socket.gethostname(),
                 agent.exposure.describe())
        print(f"ray-accel agent serving {agent.url}/metrics", flush=True)
        await stop.wait()
    finally:
        await agent.stop()
