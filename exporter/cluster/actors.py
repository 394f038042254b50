"""The Ray actors `ray-accel deploy` starts: one agent per node and their supervisor.

Both are detached, named actors in the `ray-accel` namespace, so they outlive
the command that deployed them and a second deploy finds them instead of
starting more. They take no CPU (num_cpus=0) and Ray restarts them when their
process dies (max_restarts=-1). The supervisor runs on the head node; every
few seconds it starts an agent on each alive node that has none (a node that
joined, or an agent that Ray gave up on), has Ray restart an agent that stopped
sampling or stopped answering, stops the agents of nodes that died, and keeps
the Prometheus discovery file current.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..agent import Agent
from ..config import DEFAULT_INTERVAL_S, AgentConfig
from ..exposure import ExposureSettings
from .gcs import ClusterGcs
from .registry import AgentRegistry
from .sd_file import default_path, render, write_atomically, write_sd_file

log = logging.getLogger(__name__)

NAMESPACE = "ray-accel"
SUPERVISOR_NAME = "ray-accel-supervisor"
AGENT_PREFIX = "ray-accel-agent-"
DEFAULT_WATCH_S = 5.0
AGENT_START_TIMEOUT_S = 60.0
# How long a ping may stay unanswered before the supervisor has Ray restart the agent.
# Generous: a ping also waits for an agent that is still starting (a new worker
# process on a busy node), and the actor's own thread only ever runs short calls.
PING_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DeploySettings:
    """How deployed agents run; the supervisor keeps them and compares them on redeploy."""

    host: str | None = None  # None: the node's IP
    port: int = 0
    interval_s: float = DEFAULT_INTERVAL_S
    register_interval_s: float = 10.0
    watch_s: float = DEFAULT_WATCH_S
    sd_file: str | None = None  # None: next to Ray's discovery file on the head
    write_sd_file: bool = True
    node_labels: tuple[tuple[str, str], ...] = ()
    backends: tuple[str, ...] | None = None
    otlp_endpoint: str | None = None
    otlp_protocol: str | None = None
    otlp_interval_s: float | None = None
    metrics_auth: str | None = None  # None: "token" unless host is a loopback address
    web_config_file: str | None = None

    def agent_config(self, node_id: str, node_ip: str, gcs_address: str) -> AgentConfig:
        """The configuration of the agent on one node."""
        return AgentConfig(
            host=self.host or node_ip, port=self.port, interval_s=self.interval_s,
            backends=self.backends, node_labels=dict(self.node_labels),
            ray_address=gcs_address, ray_node_id=node_id,
            register_interval_s=self.register_interval_s, deployed=True,
            otlp_endpoint=self.otlp_endpoint, otlp_protocol=self.otlp_protocol,
            otlp_interval_s=self.otlp_interval_s,
            exposure=ExposureSettings(metrics_auth=self.metrics_auth,
                                      web_config_file=self.web_config_file),
        )


def agent_name(node_id: str) -> str:
    return AGENT_PREFIX + node_id


def deployed_agents() -> dict[str, Any]:
    """node id -> handle of every deployed agent actor that is not dead."""
    agents = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != NAMESPACE or not entry["name"].startswith(AGENT_PREFIX):
            continue
        try:
            agents[entry["name"].removeprefix(AGENT_PREFIX)] = ray.get_actor(entry["name"],
                                                                             NAMESPACE)
        except ValueError:  # ended since it was listed
            continue
    return agents


def start_agent(node_id: str, settings: DeploySettings):
    """The agent actor of a node, started unless it already exists."""
    return RemoteAgentActor.options(
        name=agent_name(node_id), namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
        num_cpus=0, max_restarts=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(settings)


def stop_agents(registry: AgentRegistry, timeout_s: float = 30.0) -> list[str]:
    """Stop every deployed agent (each removes its registration), then end its actor.

    Registrations of deployed agents that could not remove their own (killed,
    or too slow) are deleted as well. Returns the node ids whose agents stopped.
    """
    agents = deployed_agents()
    if agents:
        ray.wait([h.stop.remote() for h in agents.values()], num_returns=len(agents),
                 timeout=timeout_s)
    for handle in agents.values():
        ray.kill(handle, no_restart=True)
    for record in registry.records():
        if record.deployed:
            registry.remove(record.node_id)
    return sorted(agents)


class AgentActor:
    """An `Agent` inside a Ray actor, on an event loop of its own thread.

    The agent listens on the node's IP, attributes to this node and registers
    as deployed. The constructor returns once it serves, so a failure to start
    (say, the port is taken) fails the actor's creation.
    """

    def __init__(self, settings: DeploySettings) -> None:
        logging.getLogger("ray_accel").setLevel(logging.INFO)
        context = ray.get_runtime_context()
        config = settings.agent_config(context.get_node_id(), ray.util.get_node_ip_address(),
                                       context.gcs_address)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="ray-accel-agent-loop", daemon=True)
        self._thread.start()
        self.agent = Agent(config)
        self._run(self.agent.start(), AGENT_START_TIMEOUT_S)

    def info(self) -> dict[str, Any]:
        """Where the agent serves and whether it still samples."""
        return {"node_id": self.agent.config.ray_node_id, "url": self.agent.url,
                "pid": os.getpid(), "healthy": self.agent.sampler.alive}

    def stop(self) -> None:
        """Stop the agent cleanly (it deletes its registration); the actor stays until killed."""
        try:
            self._run(self.agent.stop(), 30.0)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _run(self, coroutine: Coroutine, timeout_s: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)


class Supervisor:
    """Keeps one healthy agent on every alive node; runs on the head node."""

    def __init__(self, settings: DeploySettings) -> None:
        logging.getLogger("ray_accel").setLevel(logging.INFO)
        self.settings = settings
        self._gcs = ClusterGcs(ray.get_runtime_context().gcs_address)
        self._registry = AgentRegistry(self._gcs)
        self._sd_path: Path | None = None
        self._pings: dict[str, tuple[Any, float]] = {}  # node id -> (reply, sent at)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._watch, name="ray-accel-supervisor", daemon=True).start()

    def get_settings(self) -> DeploySettings:
        return self.settings

    def sd_path(self) -> str | None:
        """Where the discovery file is written (on the head node), None when off."""
        return str(self._sd_path) if self._sd_path else None

    def reconcile(self) -> None:
        """One pass: start missing agents, restart unhealthy ones, clean up, write the file."""
        with self._lock:
            if self._stopped.is_set():
                return
            nodes = self._gcs.nodes()
            alive = {n.node_id for n in nodes if n.alive}
            agents = deployed_agents()
            for node_id in sorted(alive - agents.keys()):
                log.info("starting an agent on node %s", node_id)
                start_agent(node_id, self.settings)
            for node_id in sorted(agents.keys() - alive):
                log.info("node %s is gone; ending its agent", node_id)
                ray.kill(agents.pop(node_id), no_restart=True)
            self._check_health(agents)
            records = self._registry.records()
            for record in records:
                if record.node_id not in alive:
                    self._registry.remove(record.node_id)
            self._write_sd_file(nodes, [r for r in records if r.node_id in alive])

    def shutdown(self) -> list[str]:
        """Stop watching, stop every agent, empty the discovery file; returns the node ids."""
        self._stopped.set()
        with self._lock:
            stopped = stop_agents(self._registry)
            if self._sd_path is not None:
                write_atomically(self._sd_path, render([]))
            return stopped

    def _check_health(self, agents: dict[str, Any]) -> None:
        """Have Ray restart agents that stopped sampling or stopped answering pings."""
        for node_id in set(self._pings) - agents.keys():
            del self._pings[node_id]
        now = time.monotonic()
        for node_id, handle in agents.items():
            self._pings.setdefault(node_id, (handle.info.remote(), now))
        if not self._pings:
            return
        replies = [reply for reply, _ in self._pings.values()]
        ready, _ = ray.wait(replies, num_returns=len(replies),
                            timeout=min(self.settings.watch_s, 5.0))
        answered = set(ready)
        for node_id, (reply, sent_at) in list(self._pings.items()):
            if reply not in answered:
                if time.monotonic() - sent_at > PING_TIMEOUT_S:
                    log.warning("agent on node %s does not answer; restarting it", node_id)
                    self._restart(node_id, agents[node_id])
                continue
            del self._pings[node_id]
            try:
                healthy = ray.get(reply)["healthy"]
            except ray.exceptions.RayError:
                continue  # dead or restarting: Ray restarts it, or the next pass starts it anew
            if not healthy:
                log.warning("agent on node %s stopped sampling; restarting it", node_id)
                self._restart(node_id, agents[node_id])

    def _restart(self, node_id: str, handle: Any) -> None:
        self._pings.pop(node_id, None)
        ray.kill(handle, no_restart=False)

    def _write_sd_file(self, nodes, records) -> None:
        if not self.settings.write_sd_file:
            return
        if self._sd_path is None:
            head = next((n for n in nodes if n.is_head and n.alive), None)
            if self.settings.sd_file:
                self._sd_path = Path(self.settings.sd_file)
            elif head is not None and head.session_dir:
                self._sd_path = default_path(head.session_dir)
            else:
                return
        try:
            write_sd_file(self._sd_path, records)
        except OSError as error:
            log.warning("cannot write the discovery file %s: %s", self._sd_path, error)

    def _watch(self) -> None:
        while not self._stopped.is_set():
            try:
                self.reconcile()
            except Exception:  # the supervisor must outlive a failed pass
                log.exception("supervision pass failed")
            self._stopped.wait(self.settings.watch_s)


RemoteAgentActor = ray.remote(AgentActor)
RemoteSupervisor = ray.remote(Supervisor)
