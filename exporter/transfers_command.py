"""`ray-accel transfers`: the cluster's in-flight Ray Direct Transport transfers, and the
agent options that watch transfers and hung collectives.

The command asks the cluster's State API (through the dashboard address the
GCS holds) for unfinished actor tasks, pairs the `__ray_call__` sends and
receives into transfers (`attribution/transfers.py`), and names the devices
each end's actor holds from the snapshots of the agents registered in the
cluster (an actor on a node without an agent shows no devices).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .agent_client import open_agent
from .attribution.transfers import (
    DEFAULT_PAIR_WINDOW_S,
    DEFAULT_REPORT_AFTER_S,
    DEFAULT_STALL_AFTER_S,
    PAIRING_MODES,
    Transfer,
    pair_transfers,
)
from .collective import DEFAULT_BUSY_UTILIZATION, DEFAULT_FLAT_BYTES_PER_S, DEFAULT_WINDOW_S

FETCH_TIMEOUT_S = 5.0


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _positive(text: str) -> float:
    value = _number(text)
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 86400, got {text}")
    return value


def _ratio(text: str) -> float:
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a ratio in (0, 1], got {text}")
    return value


def add_agent_transfer_arguments(agent: argparse.ArgumentParser) -> None:
    group = agent.add_argument_group("Transfers and collectives (docs/transfers.md)")
    group.add_argument("--no-transfers", action="store_true",
                       help="do not watch Ray Direct Transport transfers")
    group.add_argument("--transfer-stall-after", type=_positive, default=DEFAULT_STALL_AFTER_S,
                       metavar="SECONDS",
                       help="age past which an in-flight transfer counts as stalled "
                            f"(default {DEFAULT_STALL_AFTER_S:g} s; Ray aborts at 60 s)")
    group.add_argument("--transfer-report-after", type=_positive,
                       default=DEFAULT_REPORT_AFTER_S, metavar="SECONDS",
                       help="age from which this node's __ray_call__ tasks are reported "
                            f"(default {DEFAULT_REPORT_AFTER_S:g} s)")
    group.add_argument("--transfer-pairing", choices=PAIRING_MODES, default="auto",
                       help="which agent pairs the cluster's transfers: the head node's "
                            "(auto, the default), this one in any case, or none")
    group.add_argument("--collective-stall-window", type=_positive, default=DEFAULT_WINDOW_S,
                       metavar="SECONDS",
                       help="how long a device must be busy with flat interconnect counters "
                            "to be suspected of a hung collective "
                            f"(default {DEFAULT_WINDOW_S:g} s)")
    group.add_argument("--collective-busy-utilization", type=_ratio,
                       default=DEFAULT_BUSY_UTILIZATION, metavar="RATIO",
                       help="utilization that counts as busy for that "
                            f"(default {DEFAULT_BUSY_UTILIZATION:g})")
    group.add_argument("--collective-flat-rate", type=_positive,
                       default=DEFAULT_FLAT_BYTES_PER_S, metavar="BYTES_PER_S",
                       help="interconnect bytes/s at or below which counters count as flat "
                            f"(default {DEFAULT_FLAT_BYTES_PER_S:g})")


def transfer_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `AgentConfig` fields the arguments above set."""
    return {
        "transfers": not args.no_transfers,
        "transfer_stall_after_s": args.transfer_stall_after,
        "transfer_report_after_s": args.transfer_report_after,
        "transfer_pairing": args.transfer_pairing,
        "collective_window_s": args.collective_stall_window,
        "collective_busy_utilization": args.collective_busy_utilization,
        "collective_flat_bytes_per_s": args.collective_flat_rate,
    }


# ------------------------------------------------------------------ the command


def _holders_of(url: str) -> dict[str, tuple[str, ...]]:
    """actor id -> device UUIDs, from one agent's snapshot (empty when it cannot be read)."""
    try:
        with open_agent(f"{url}/api/v1/snapshot", FETCH_TIMEOUT_S) as reply:
            doc = json.load(reply)
    except (OSError, ValueError, urllib.error.URLError):
        return {}
    found: dict[str, list[str]] = {}
    for device in doc.get("devices", []):
        for holder in device.get("holders", []):
            if holder.get("ray_actor_id"):
                found.setdefault(holder["ray_actor_id"], []).append(device["uuid"])
    return {actor: tuple(sorted(uuids)) for actor, uuids in found.items()}


def cluster_actor_devices(urls: Iterable[str]) -> dict[str, tuple[str, ...]]:
    urls = list(urls)
    merged: dict[str, tuple[str, ...]] = {}
    if not urls:
        return merged
    with ThreadPoolExecutor(max_workers=min(len(urls), 16)) as pool:
        for found in pool.map(_holders_of, urls):
            merged.update(found)
    return merged


def cluster_transfers(address: str | None, stall_after_s: float) -> tuple[Transfer, ...]:
    """The cluster's in-flight transfers, with devices from the registered agents."""
    from .attribution.ray_sources import RaySources
    from .cluster.gcs import ClusterGcs, resolve_gcs_address
    from .cluster.registry import AgentRegistry

    gcs_address = resolve_gcs_address(address)
    with ClusterGcs(gcs_address) as gcs:
        urls = [record.url for record in AgentRegistry(gcs).live()]
    with RaySources.for_cluster(gcs_address) as sources:
        tasks = sources.actor_tasks()
    return pair_transfers(tasks, time.time(), stall_after_s, cluster_actor_devices(urls),
                          DEFAULT_PAIR_WINDOW_S)


def _short(text: str) -> str:
    return text[:12]


def render(transfers: Iterable[Transfer]) -> str:
    rows = [("STATE", "AGE_S", "SOURCE (actor, devices)", "DESTINATION (actor, devices)")]
    for t in transfers:
        labels = t.labels()
        rows.append((
            "stalled" if t.stalled else "in-flight", f"{t.age_s:.1f}",
            f"{labels['src_actor_class']} {_short(labels['src_actor_id'])} "
            f"[{labels['src_devices'] or '-'}]",
            f"{labels['dst_actor_class']} {_short(labels['dst_actor_id'])} "
            f"[{labels['dst_devices'] or '-'}]"))
    if len(rows) == 1:
        return "no RDT transfers in flight\n"
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
                   for r in rows)


def _as_json(transfers: Iterable[Transfer]) -> str:
    return json.dumps([{**t.labels(), "age_s": t.age_s, "stalled": t.stalled,
                        "src_task_id": t.source.task.task_id,
                        "dst_task_id": t.destination.task.task_id,
                        "consumer_task_id": t.consumer_task_id} for t in transfers], indent=2)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .attribution.ray_sources import RayNotFound, RaySourceError

    try:
        transfers = cluster_transfers(args.address, args.stall_after)
    except (RayNotFound, RaySourceError, ConnectionError, OSError) as error:
        print(f"ray-accel transfers: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(_as_json(transfers) + "\n" if args.json else render(transfers))
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "transfers", help="list the cluster's in-flight Ray Direct Transport transfers")
    parser.add_argument("--address", metavar="ADDR",
                        help="GCS address of the Ray cluster (default: RAY_ADDRESS, else the "
                             "Ray node on this host)")
    parser.add_argument("--stall-after", type=_positive, default=DEFAULT_STALL_AFTER_S,
                        metavar="SECONDS",
                        help=f"age past which a transfer is stalled (default "
                             f"{DEFAULT_STALL_AFTER_S:g} s)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(run=_run)
