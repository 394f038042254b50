"""What `ray-accel deploy`, `undeploy`, `status` and `sd-file` do, apart from their flags.

Deploying and undeploying need a Ray driver (`ray.init`) to create and end
actors; reading the state of the agents needs only the GCS (see gcs.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..agent import UNKNOWN_VERSION
from ..agent_client import open_agent
from .actors import NAMESPACE, SUPERVISOR_NAME, DeploySettings, RemoteSupervisor, stop_agents
from .gcs import ClusterGcs, ClusterNode
from .registry import AgentRecord, AgentRegistry
from .sd_file import default_path, write_sd_file

HEALTH_TIMEOUT_S = 2.0


class DeployError(RuntimeError):
    """A deployment request that cannot be carried out; nothing was changed."""


@dataclass
class DeployOutcome:
    """Agents up after a deploy, the nodes still without one, and where discovery goes."""

    already_deployed: bool
    agents: list[AgentRecord]
    missing: list[str]
    sd_path: str | None


@contextlib.contextmanager
def ray_driver(gcs_address: str) -> Iterator[None]:
    """Connect this process to the cluster as a Ray driver for the duration of the block."""
    ray.init(address=gcs_address, namespace=NAMESPACE, logging_level=logging.ERROR,
             log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _supervisor():
    try:
        return ray.get_actor(SUPERVISOR_NAME, NAMESPACE)
    except ValueError:
        return None


def deploy(gcs_address: str, settings: DeploySettings, wait_s: float) -> DeployOutcome:
    """Start the supervisor (which starts the agents) unless it runs; wait for the agents.

    Raises `DeployError` when agents are already deployed with other settings.
    """
    with ClusterGcs(gcs_address) as gcs:
        head = gcs.head()  # fails fast where ray.init would retry for minutes
        with ray_driver(gcs_address):
            return _deploy(gcs, head, settings, wait_s)


def _deploy(gcs: ClusterGcs, head: ClusterNode, settings: DeploySettings,
            wait_s: float) -> DeployOutcome:
    already = _supervisor() is not None
    supervisor = RemoteSupervisor.options(
        name=SUPERVISOR_NAME, namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
        num_cpus=0, max_restarts=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(head.node_id, soft=False),
    ).remote(settings)
    current = ray.get(supervisor.get_settings.remote(), timeout=120)
    if current != settings:
        raise DeployError("ray-accel is already deployed on this cluster with other "
                          f"settings ({_differences(current, settings)}); run "
                          "`ray-accel undeploy` first to change them")
    agents, missing = wait_for_agents(gcs, wait_s)
    return DeployOutcome(already, agents, missing, ray.get(supervisor.sd_path.remote()))


def other_versions(agents: list[AgentRecord], mine: str) -> dict[str, list[str]]:
    """Version -> the nodes whose agent runs it, for each known version but `mine`: deployed
    agents keep the code they started with when the package is upgraded under them."""
    found: dict[str, list[str]] = {}
    for record in agents:
        if record.version not in ("", UNKNOWN_VERSION, mine):
            found.setdefault(record.version, []).append(record.node_id)
    return found


def _differences(current: DeploySettings, wanted: DeploySettings) -> str:
    changed = [name for name in DeploySettings.__dataclass_fields__
               if getattr(current, name) != getattr(wanted, name)]
    return ", ".join(f"{name}: {getattr(current, name)!r} deployed, {getattr(wanted, name)!r} "
                     "asked" for name in changed)


def wait_for_agents(gcs: ClusterGcs, wait_s: float) -> tuple[list[AgentRecord], list[str]]:
    """Wait until every alive node has a live deployed agent, or `wait_s` passes.

    Returns the live deployed agents on alive nodes and the alive nodes without one.
    """
    registry = AgentRegistry(gcs)
    deadline = time.monotonic() + wait_s
    while True:
        alive = {n.node_id for n in gcs.nodes(alive_only=True)}
        agents = [r for r in registry.live() if r.deployed and r.node_id in alive]
        missing = sorted(alive - {r.node_id for r in agents})
        if not missing or time.monotonic() >= deadline:
            return agents, missing
        time.sleep(0.5)


def undeploy(gcs_address: str) -> list[str]:
    """End the supervisor and every deployed agent; returns the node ids of the agents.

    Each agent is asked to stop first, so it deletes its own registration; any
    registration of a deployed agent left behind is deleted too. The supervisor
    empties its discovery file. Registrations of standalone agents are kept.
    """
    with ClusterGcs(gcs_address) as gcs:
        gcs.head()  # fails fast where ray.init would retry for minutes
        with ray_driver(gcs_address):
            return _undeploy(gcs)


def _undeploy(gcs: ClusterGcs) -> list[str]:
    stopped: set[str] = set()
    supervisor = _supervisor()
    if supervisor is not None:
        stopped.update(ray.get(supervisor.shutdown.remote(), timeout=120))
        ray.kill(supervisor, no_restart=True)
    # Agents the supervisor did not know (it was gone, or never got to them).
    stopped.update(stop_agents(AgentRegistry(gcs)))
    return sorted(stopped)


@dataclass
class AgentStatus:
    """One row of `ray-accel status`: an alive node and its agent, or an agent without node."""

    node_id: str
    node_ip: str
    url: str = ""
    health: str = "no agent"
    simulated: bool | None = None
    deployed: bool | None = None
    pid: int | None = None
    heartbeat_age_s: float | None = None
    version: str = ""  # the ray-accel version the agent runs
    #: What the agent's /healthz names as not answering, one line each ("nvidia 3 stale: ...").
    not_answering: list[str] = field(default_factory=list)


def _problem_line(problem: dict) -> str:
    """One entry of /healthz's `not_answering` as a line: what, its state, and why."""
    what = (f"backend {problem['backend']}" if "backend" in problem
            else f"{problem.get('vendor', '?')} {problem.get('index', '?')}")
    return f"{what} {problem.get('state', 'down')}: {problem.get('reason', 'not answering')}"


def probe_health(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> tuple[str, list[str]]:
    """The agent's /healthz status ("ok", "degraded", "stalled", "starting") with what it
    names as not answering, or why it did not answer (and nothing named)."""
    fallback = "unknown"
    try:
        with open_agent(f"{url}/healthz", timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as error:  # 503 (starting, stalled) still carries the document
        fallback = f"HTTP {error.code}"
        try:
            body = error.read()
        except OSError:
            return fallback, []
    except (OSError, ValueError) as error:
        return f"unreachable ({getattr(error, 'reason', error)})", []
    try:
        document = json.loads(body)
    except ValueError:
        return fallback, []
    if not isinstance(document, dict):
        return fallback, []
    problems = document.get("not_answering")
    lines = ([_problem_line(p) for p in problems if isinstance(p, dict)]
             if isinstance(problems, list) else [])
    return str(document.get("status", fallback)), lines


def cluster_status(gcs: ClusterGcs) -> list[AgentStatus]:
    """Every alive node with its registered agent (probed over HTTP), plus orphan records."""
    nodes: dict[str, ClusterNode] = {n.node_id: n for n in gcs.nodes(alive_only=True)}
    records = {r.node_id: r for r in AgentRegistry(gcs).records()}
    rows = []
    for node_id in [*nodes, *sorted(records.keys() - nodes.keys())]:
        record = records.get(node_id)
        node = nodes.get(node_id)
        row = AgentStatus(node_id=node_id, node_ip=node.node_ip if node else record.node_ip)
        if record is not None:
            row.url, row.simulated, row.deployed, row.pid, row.version = (
                record.url, record.simulated, record.deployed, record.pid, record.version)
            row.heartbeat_age_s = round(record.age_s(), 1)
            row.health = "" if record.is_live() else "stale registration"
        if node is None:
            row.health = "node gone" if not row.health else row.health
        rows.append(row)
    probes = [r for r in rows if r.url and not r.health]
    with ThreadPoolExecutor(max_workers=16) as pool:
        for row, (health, problems) in zip(
                probes, pool.map(lambda r: probe_health(r.url), probes), strict=True):
            row.health, row.not_answering = health, problems
    return rows


def sd_file_path(gcs: ClusterGcs, output: str | None) -> Path:
    """`output`, else the default next to Ray's discovery file when that folder is here."""
    if output:
        return Path(output)
    session_dir = gcs.head().session_dir
    if not Path(session_dir).is_dir():
        raise DeployError(f"the head node's session folder {session_dir} is not on this "
                          "machine; give --output")
    return default_path(session_dir)


def write_discovery(gcs: ClusterGcs, path: Path) -> int:
    """Write the discovery file for the live agents on alive nodes; returns how many."""
    alive = {n.node_id for n in gcs.nodes(alive_only=True)}
    records = [r for r in AgentRegistry(gcs).live() if r.node_id in alive]
    write_sd_file(path, records)
    return len(records)
