"""Command-line flags and subcommands for running agents across a Ray cluster.

`register(commands)` adds `deploy`, `undeploy`, `status` and `sd-file`;
`add_agent_arguments(parser)` adds the registration and OTLP flags of
`ray-accel agent`, which `agent_options(args, parser)` checks and turns into
`AgentConfig` fields.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cli_args import bounded_number, label_pair, node_label_problem
from ..sinks.otlp_settings import PROTOCOLS, otlp_settings
from ..web_auth import METRICS_AUTH_CHOICES

if TYPE_CHECKING:  # deploy imports Ray: loaded only by the commands that use it
    from .deploy import AgentStatus

DEFAULT_REGISTER_INTERVAL_S = 10.0
DEFAULT_WAIT_S = 120.0
DEFAULT_SD_INTERVAL_S = 5.0


def _gcs_address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if "://" in text or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"expected the cluster's GCS address as HOST:PORT (e.g. 10.0.0.1:6379), got {text!r}")
    return text


def _ip_address(text: str) -> str:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an IP address (0.0.0.0 listens on every interface), got {text!r}"
        ) from None
    return text


def _absolute_path(text: str) -> str:
    if not os.path.isabs(text):
        raise argparse.ArgumentTypeError(
            f"expected an absolute path (it is a path on the head node), got {text!r}")
    return text


def _address_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", type=_gcs_address, metavar="HOST:PORT",
                        help="GCS address of the Ray cluster (default: RAY_ADDRESS, else the "
                             "Ray cluster running on this machine)")


def _otlp_arguments(parser: argparse.ArgumentParser) -> None:
    otlp = parser.add_argument_group(
        "OpenTelemetry export",
        "OTLP metric export, off unless an endpoint is given here or in "
        "OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_METRICS_ENDPOINT; the other "
        "OTEL_EXPORTER_OTLP_* variables (headers, TLS, compression) apply as usual")
    otlp.add_argument("--otlp-endpoint", metavar="URL",
                      help="collector URL, e.g. http://127.0.0.1:4317 (gRPC) or "
                           "http://127.0.0.1:4318 (HTTP; /v1/metrics is added to a bare URL)")
    otlp.add_argument("--otlp-protocol", choices=PROTOCOLS,
                      help="grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_PROTOCOL, "
                           "else grpc)")
    otlp.add_argument("--otlp-interval", metavar="SECONDS",
                      type=bounded_number(float, 0.1, 3600, "--otlp-interval"),
                      help="seconds between exports (default: OTEL_METRIC_EXPORT_INTERVAL, "
                           "else 10)")


def _register_interval_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--register-interval", metavar="SECONDS",
                        type=bounded_number(float, 0.5, 3600, "--register-interval"),
                        default=DEFAULT_REGISTER_INTERVAL_S,
                        help="how often the agent refreshes its registration in the cluster's "
                             f"GCS (default {DEFAULT_REGISTER_INTERVAL_S:g} s); readers take an "
                             "agent for dead after three missed refreshes")


def add_agent_arguments(agent: argparse.ArgumentParser) -> None:
    """The registration and OTLP flags of `ray-accel agent`."""
    cluster = agent.add_argument_group("Ray cluster registration")
    _register_interval_argument(cluster)
    cluster.add_argument("--no-register", action="store_true",
                         help="do not register in the cluster's GCS (on by default whenever "
                              "the agent finds its Ray node)")
    _otlp_arguments(agent)


def _otlp_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    try:
        otlp_settings(args.otlp_endpoint, args.otlp_protocol, args.otlp_interval, os.environ)
    except ValueError as error:
        parser.error(str(error))
    return {"otlp_endpoint": args.otlp_endpoint, "otlp_protocol": args.otlp_protocol,
            "otlp_interval_s": args.otlp_interval}


def agent_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """`AgentConfig` fields from the agent's registration and OTLP flags (exit 2 when bad)."""
    return {"register_interval_s": 0.0 if args.no_register else args.register_interval,
            **_otlp_options(args, parser)}


def register(commands: argparse._SubParsersAction) -> None:
    """Add the cluster subcommands to `ray-accel`."""
    deploy = commands.add_parser(
        "deploy", help="run an agent on every node of a Ray cluster, as Ray actors",
        description="Start a detached supervisor actor on the head node that keeps one agent "
                    "actor on every alive node (nodes that join later included) and writes "
                    "a Prometheus discovery file. Running it again changes nothing.")
    _address_argument(deploy)
    deploy.add_argument("--host", type=_ip_address, metavar="IP",
                        help="address the agents listen on (default: each node's IP)")
    deploy.add_argument("--port", type=bounded_number(int, 0, 65535, "--port"), default=0,
                        help="port of every agent (default 0: any free port; discovery tells "
                             "Prometheus which)")
    deploy.add_argument("--interval", metavar="SECONDS", default=1.0,
                        type=bounded_number(float, 0.05, 3600, "--interval"),
                        help="sampling interval (default 1 s)")
    _register_interval_argument(deploy)
    deploy.add_argument("--watch-interval", metavar="SECONDS", default=5.0,
                        type=bounded_number(float, 0.5, 3600, "--watch-interval"),
                        help="how often the supervisor checks nodes and agents (default 5 s)")
    sd_file = deploy.add_mutually_exclusive_group()
    sd_file.add_argument("--sd-file", metavar="PATH", type=_absolute_path,
                         help="Prometheus discovery file on the head node (default: "
                              "<session dir>/ray_accel_service_discovery.json)")
    sd_file.add_argument("--no-sd-file", action="store_true",
                         help="do not write a discovery file")
    deploy.add_argument("--node-label", action="append", type=label_pair, default=[],
                        metavar="NAME=VALUE", help="label added to every series (repeatable)")
    deploy.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                        help="vendor backend to load (repeatable; default: every installed one)")
    _otlp_arguments(deploy)
    deploy.add_argument("--metrics-auth", choices=METRICS_AUTH_CHOICES,
                        help="whether the agents' /metrics needs the cluster token (default: "
                             "token, unless --host is a loopback address)")
    deploy.add_argument("--web-config-file", metavar="FILE", type=_absolute_path,
                        help="TLS and basic auth of every agent (exporter-toolkit web "
                             "configuration; the path must hold the file on every node)")
    deploy.add_argument("--wait", metavar="SECONDS", default=DEFAULT_WAIT_S,
                        type=bounded_number(float, 0, 3600, "--wait"),
                        help="how long to wait for every node's agent (default "
                             f"{DEFAULT_WAIT_S:g} s; 0 returns at once)")
    deploy.set_defaults(run=_run_deploy)

    undeploy = commands.add_parser(
        "undeploy", help="stop the supervisor and every deployed agent, and their registrations")
    _address_argument(undeploy)
    undeploy.set_defaults(run=_run_undeploy)

    status = commands.add_parser("status", help="list the cluster's nodes and their agents")
    _address_argument(status)
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(run=_run_status)

    sd_file_command = commands.add_parser(
        "sd-file", help="write a Prometheus discovery file of the registered agents",
        description="For standalone agents (deployed ones get the supervisor's file): list "
                    "every live registered agent in Prometheus's file_sd format.")
    _address_argument(sd_file_command)
    sd_file_command.add_argument("--output", metavar="PATH",
                                 help="file to write (default: next to Ray's discovery file, "
                                      "when the head node's session folder is on this machine)")
    sd_file_command.add_argument("--watch", action="store_true",
                                 help="keep the file current until interrupted")
    sd_file_command.add_argument("--interval", metavar="SECONDS", default=DEFAULT_SD_INTERVAL_S,
                                 type=bounded_number(float, 0.5, 3600, "--interval"),
                                 help=f"with --watch, how often (default "
                                      f"{DEFAULT_SD_INTERVAL_S:g} s)")
    sd_file_command.add_argument("--print-scrape-job", action="store_true",
                                 help="also print the Prometheus scrape job (YAML) that reads "
                                      "the file, with the credentials below")
    sd_file_command.add_argument("--token-file", metavar="FILE", type=_absolute_path,
                                 help="with --print-scrape-job: the file holding the cluster's "
                                      "Ray token, as Prometheus will read it")
    sd_file_command.add_argument("--ca-file", metavar="FILE", type=_absolute_path,
                                 help="with --print-scrape-job: the CA that signed agents' "
                                      "TLS certificates")
    sd_file_command.set_defaults(run=_run_sd_file)


def _fail(command: str, error: Exception) -> int:
    print(f"ray-accel {command}: {error}", file=sys.stderr)
    return 1


def _with_cluster(command: str, body: Callable[[Any], int], address: str | None) -> int:
    """Run `body(gcs)` against the cluster; connection problems become exit status 1."""
    from ..attribution.ray_sources import RayNotFound, RaySourceError
    from .deploy import DeployError
    from .gcs import ClusterGcs, resolve_gcs_address

    try:
        with ClusterGcs(resolve_gcs_address(address)) as gcs:
            return body(gcs)
    except (RayNotFound, RaySourceError, DeployError, ConnectionError, OSError) as error:
        return _fail(command, error)


def _deploy_settings(args: argparse.Namespace, parser: argparse.ArgumentParser):
    from ..backends import available_backends
    from .actors import DeploySettings

    labels_wrong = node_label_problem(args.node_label)
    if labels_wrong:
        parser.error(labels_wrong)
    if args.backends:
        unknown = sorted(set(args.backends) - set(available_backends()))
        if unknown:
            parser.error(f"unknown backend(s) {', '.join(unknown)}; "
                         f"installed: {', '.join(available_backends())}")
    return DeploySettings(
        host=args.host, port=args.port, interval_s=args.interval,
        register_interval_s=args.register_interval, watch_s=args.watch_interval,
        sd_file=args.sd_file, write_sd_file=not args.no_sd_file,
        node_labels=tuple(args.node_label),
        backends=tuple(args.backends) if args.backends else None,
        metrics_auth=args.metrics_auth, web_config_file=args.web_config_file,
        **_otlp_options(args, parser),
    )


def _run_deploy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _deploy_settings(args, parser)

    def body(gcs) -> int:
        from ..agent import agent_version
        from .deploy import deploy, other_versions

        outcome = deploy(gcs.address, settings, args.wait)
        verb = "already deployed" if outcome.already_deployed else "deployed"
        print(f"ray-accel {verb} on the cluster at {gcs.address}: "
              f"{len(outcome.agents)} agent(s) up")
        for record in outcome.agents:
            print(f"  {record.node_id}  {record.url}")
        mine = agent_version()
        for other, nodes in sorted(other_versions(outcome.agents, mine).items()):
            print(f"ray-accel deploy: the agents on {len(nodes)} node(s) run ray-accel {other}, "
                  f"not {mine} (this command's): deployed agents keep the code they started "
                  "with; `ray-accel undeploy` then `ray-accel deploy` restarts them on this "
                  "version", file=sys.stderr)
        if outcome.sd_path:
            print(f"Prometheus discovery file (on the head node): {outcome.sd_path}")
        if outcome.missing:
            print(f"ray-accel deploy: no agent up yet on node(s) {', '.join(outcome.missing)} "
                  f"after {args.wait:g} s; the supervisor keeps trying (see "
                  "`ray-accel status` and the actors' logs)", file=sys.stderr)
            return 1
        return 0

    return _with_cluster("deploy", body, args.address)


def _run_undeploy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    def body(gcs) -> int:
        from .deploy import undeploy

        stopped = undeploy(gcs.address)
        print(f"ray-accel undeployed: {len(stopped)} agent(s) stopped")
        return 0

    return _with_cluster("undeploy", body, args.address)


def _run_status(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    def body(gcs) -> int:
        from .deploy import cluster_status

        rows = cluster_status(gcs)
        if args.json:
            print(json.dumps([vars(row) for row in rows], indent=2))
        else:
            print(status_table(rows))
        return 0

    return _with_cluster("status", body, args.address)


def status_table(rows: list[AgentStatus]) -> str:
    """`ray-accel status`'s table: a line per row of `cluster_status`, columns aligned."""
    def mode(row) -> str:
        return "" if row.deployed is None else ("deployed" if row.deployed else "standalone")

    def flag(value: bool | None) -> str:
        return "" if value is None else ("yes" if value else "no")

    header = ("NODE ID", "NODE IP", "URL", "HEALTH", "SIMULATED", "MODE", "VERSION", "PID",
              "HEARTBEAT", "NOT ANSWERING")
    lines = [header] + [
        (row.node_id, row.node_ip, row.url, row.health, flag(row.simulated), mode(row),
         row.version, "" if row.pid is None else str(row.pid),
         "" if row.heartbeat_age_s is None else f"{row.heartbeat_age_s:g}s ago",
         "; ".join(row.not_answering))
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def _run_sd_file(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.output and not Path(args.output).parent.is_dir():
        parser.error(f"--output: folder {str(Path(args.output).parent)!r} does not exist")

    def body(gcs) -> int:
        from .deploy import sd_file_path, write_discovery

        path = sd_file_path(gcs, args.output)
        count = write_discovery(gcs, path)
        print(f"wrote {count} target(s) to {path}", flush=True)
        if args.print_scrape_job:
            import yaml

            from .sd_file import scrape_job

            job = scrape_job(str(path), args.token_file, args.ca_file)
            print(yaml.safe_dump({"scrape_configs": [job]}, sort_keys=False), end="",
                  flush=True)
        if not args.watch:
            return 0
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        while not stop.wait(args.interval):
            try:
                write_discovery(gcs, path)
            except Exception as error:  # keep watching through a GCS that is away
                print(f"ray-accel sd-file: {error}", file=sys.stderr, flush=True)
        return 0

    return _with_cluster("sd-file", body, args.address)
