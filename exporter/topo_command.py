"""`ray-accel topo`: this node's device matrix, or the cluster's nodes grouped by domain.

Without `--address` it opens the vendor backends on this machine and prints
the matrix `nvidia-smi topo -m` would. With `--address` it asks every agent
registered in the cluster for its snapshot and groups the nodes by NVLink
domain, then zone and rack, so GB200 NVL72-style racks and cloud zones show up
as the units the scheduler should keep jobs within.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .backends import BackendUnavailable, load_backends
from .cli_args import scenario_name
from .model import Device
from .topology import render

FETCH_TIMEOUT_S = 5.0


def local_devices(backend_names: Sequence[str] | None = None) -> list[Device]:
    """Every device the installed backends see on this machine."""
    devices: list[Device] = []
    for backend in load_backends(backend_names):
        try:
            devices.extend(backend.open())
        except BackendUnavailable:
            continue
        finally:
            backend.close()
    return devices


@dataclass(frozen=True)
class NodeView:
    """What one node's agent says about where it sits and what it holds."""

    node_id: str
    url: str
    placement: dict[str, str]
    devices: list[str]
    error: str = ""

    @property
    def group(self) -> tuple[str, str, str]:
        """(NVLink domain, zone, rack): the grouping key, most specific first."""
        return (self.placement.get("nvlink_domain", ""), self.placement.get("zone", ""),
                self.placement.get("rack", ""))


def _fetch(node_id: str, url: str) -> NodeView:
    # Imported here: the agent's command line loads this module, and the HTTP client
    # (urllib.request, http.client, the email parser) is only for `topo --address`.
    from .agent_client import open_agent

    try:
        with open_agent(f"{url}/api/v1/snapshot", FETCH_TIMEOUT_S) as reply:
            snapshot = json.load(reply)
    except (OSError, ValueError, urllib.error.URLError) as error:
        return NodeView(node_id, url, {}, [], error=str(error))
    models = [d["model"] for d in snapshot.get("devices", []) if not d.get("parent_uuid")]
    return NodeView(node_id, url, snapshot.get("placement", {}), models)


def fetch_nodes(agents: Iterable[tuple[str, str]]) -> list[NodeView]:
    """Each (node id, agent URL)'s view, fetched concurrently."""
    agents = list(agents)
    with ThreadPoolExecutor(max_workers=min(32, max(len(agents), 1))) as pool:
        return list(pool.map(lambda agent: _fetch(*agent), agents))


def _describe(models: list[str]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for model in models:
        counts[model] += 1
    return ", ".join(f"{n}x {model}" for model, n in sorted(counts.items())) or "no devices"


def render_groups(nodes: Sequence[NodeView]) -> str:
    """The nodes grouped by NVLink domain, zone and rack, as text."""
    groups: dict[tuple[str, str, str], list[NodeView]] = defaultdict(list)
    unreachable = []
    for node in nodes:
        (unreachable if node.error else groups[node.group]).append(node)
    lines = []
    for (domain, zone, rack), members in sorted(groups.items()):
        title = f"NVLink domain {domain}" if domain else "no NVLink domain"
        where = ", ".join(f"{k} {v}" for k, v in (("zone", zone), ("rack", rack)) if v)
        lines.append(f"{title}{f' ({where})' if where else ''}: {len(members)} node(s)")
        lines += [f"  {n.node_id}  {n.url}  {_describe(n.devices)}"
                  for n in sorted(members, key=lambda n: n.node_id)]
    if unreachable:
        lines.append(f"unreachable: {len(unreachable)} node(s)")
        lines += [f"  {n.node_id}  {n.url}  {n.error}" for n in unreachable]
    return "\n".join(lines) + "\n" if lines else "no agents registered\n"


def cluster_agents(address: str) -> list[tuple[str, str]]:
    """(node id, URL) of every live agent registered in the cluster's GCS."""
    from .cluster.gcs import ClusterGcs, resolve_gcs_address
    from .cluster.registry import AgentRegistry

    with ClusterGcs(resolve_gcs_address(address)) as gcs:
        return [(record.node_id, record.url) for record in AgentRegistry(gcs).live()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", metavar="ADDR",
                        help="group the nodes of this Ray cluster (GCS address, or 'auto')")
    parser.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                        help="vendor backend to read locally (repeatable; default: all)")
    parser.add_argument("--simulate", metavar="SCENARIO", type=scenario_name,
                        help="read simulated hardware instead of this machine's: a shipped "
                             "scenario name or a JSON file, as for `agent --simulate`")


def run(args: argparse.Namespace) -> str:
    """The text `ray-accel topo` prints."""
    if args.address:
        return render_groups(fetch_nodes(cluster_agents(args.address)))
    if args.simulate:
        devices = simulated_devices(args.simulate, args.backends)
        return render(devices) if devices else "no accelerators in this scenario\n"
    devices = local_devices(args.backends)
    return render(devices) if devices else "no accelerators found on this machine\n"


def simulated_devices(scenario: str, backend_names: Sequence[str] | None = None) -> list[Device]:
    """The devices the backends see on a scenario's simulated hardware (removed afterwards).

    Raises ScenarioError for a scenario that does not load.
    """
    from .simulate import SimulatedHardware

    with SimulatedHardware.start(scenario) as hardware:
        hardware.activate()
        return local_devices(backend_names)
