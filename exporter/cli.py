"""The `ray-accel` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ..dashboard_module.standalone import register as register_dashboard
from ..grafana.cli import register as register_grafana
from . import topo_command
from .agent import DEFAULT_HOST, DEFAULT_INTERVAL_S, DEFAULT_PORT, Agent, AgentConfig, serve_forever
from .attribution.guard import DEFAULT_TASK_ID_CAP
from .backends import available_backends
from .catalog import CATALOG, NODE_LABELS
from .exposure import ExposureError, add_exposure_arguments, exposure_settings
from .record import command as record_command
from .serving import raise_open_file_limit

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
RESERVED_LABELS = frozenset({*NODE_LABELS, *(n for spec in CATALOG for n in spec.all_labels)})


def _bounded_number(
    kind: Callable[[str], float], low: float, high: float, what: str
) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be between {low:g} and {high:g}, "
                                             f"got {text}")
        return value

    return parse


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with a label-safe NAME, got {text!r}"
        )
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ray-accel", description="Accelerator observability for Ray clusters."
    )
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    agent = commands.add_parser("agent", help="run the per-node agent")
    agent.add_argument("--host", default=DEFAULT_HOST,
                       help=f"address to listen on (default {DEFAULT_HOST})")
    agent.add_argument("--port", type=_bounded_number(int, 0, 65535, "--port"),
                       default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
    agent.add_argument("--interval", type=_bounded_number(float, MIN_INTERVAL_S, MAX_INTERVAL_S,
                                                          "--interval"),
                       default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                       help=f"sampling interval (default {DEFAULT_INTERVAL_S:g} s)")
    agent.add_argument("--simulate", metavar="SCENARIO",
                       help="run on simulated hardware: a shipped scenario name or a JSON file")
    agent.add_argument("--retry", type=_bounded_number(float, 0.1, 3600, "--retry"),
                       default=30.0, metavar="SECONDS",
                       help="how often to retry a backend whose driver is missing (default 30 s)")
    agent.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                       help="vendor backend to load (repeatable; default: every installed one)")
    agent.add_argument("--node-label", action="append", type=_label, default=[],
                       metavar="NAME=VALUE", help="label added to every series (repeatable)")
    ray = agent.add_argument_group("Ray attribution")
    ray.add_argument("--ray-address", metavar="ADDR",
                     help="GCS address of the Ray cluster (default: the Ray node running on "
                          "this host, found by itself)")
    ray.add_argument("--ray-node-id", metavar="HEX",
                     help="which Ray node on this host to attribute to, when several run here")
    ray.add_argument("--no-ray", action="store_true",
                     help="do not look for Ray; export device metrics only")
    ray.add_argument("--attribution-interval",
                     type=_bounded_number(float, 0.1, 3600, "--attribution-interval"),
                     default=2.0, metavar="SECONDS",
                     help="how often to refresh Ray workers and tasks (default 2 s)")
    ray.add_argument("--task-id-cap", type=_bounded_number(int, 0, 1_000_000, "--task-id-cap"),
                     default=DEFAULT_TASK_ID_CAP, metavar="N",
                     help="distinct ray_task_id label values per 10 minutes (default "
                          f"{DEFAULT_TASK_ID_CAP}); beyond it the label is left empty")
    ray.add_argument("--hide-names", action="store_true",
                     help="leave actor classes, actor names and task names out of labels "
                          "(pids and Ray ids only)")
    from .cluster.cli import add_agent_arguments, register
    from .transfers_command import add_agent_transfer_arguments
    from .transfers_command import register as register_transfers

    add_agent_transfer_arguments(agent)
    add_agent_arguments(agent)
    add_exposure_arguments(agent)
    agent.set_defaults(run=_run_agent)

    demo = commands.add_parser(
        "demo", help="run a Ray cluster and a workload on simulated accelerators, with the agent")
    demo.add_argument("--scenario", default="hgx-h200",
                      help="simulated hardware: a shipped scenario name or a JSON file")
    demo.add_argument("--port", type=_bounded_number(int, 0, 65535, "--port"),
                      default=DEFAULT_PORT, help=f"agent port (default {DEFAULT_PORT})")
    demo.add_argument("--ready-file", type=Path, metavar="PATH",
                      help="write the demo's endpoints to PATH as JSON once everything serves")
    demo.set_defaults(run=_run_demo)

    scenarios = commands.add_parser("scenarios",
                                    help="list the shipped simulated-hardware scenarios")
    scenarios.set_defaults(run=_list_scenarios)

    catalog = commands.add_parser("catalog", help="print the metric catalog as Markdown")
    catalog.set_defaults(run=_print_catalog)

    topo = commands.add_parser(
        "topo", help="print this node's device topology, or the cluster's nodes by domain")
    topo_command.add_arguments(topo)
    topo.set_defaults(run=_print_topology)
    record = commands.add_parser(
        "record", help="record this node's devices (or an agent's history) as a scenario")
    record_command.add_arguments(record)
    record.set_defaults(run=record_command.run)
    register(commands)  # deploy, undeploy, status, sd-file
    register_transfers(commands)  # transfers
    register_grafana(commands)  # grafana
    register_dashboard(commands)  # dashboard
    return parser


def _run_agent(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .cluster.cli import agent_options
    from .transfers_command import transfer_options

    if args.backends:
        unknown = sorted(set(args.backends) - set(available_backends()))
        if unknown:
            parser.error(f"unknown backend(s) {', '.join(unknown)}; "
                         f"installed: {', '.join(available_backends())}")
    reserved = sorted({key for key, _ in args.node_label} & RESERVED_LABELS)
    if reserved:
        parser.error(f"--node-label: {', '.join(reserved)} is already used by the agent's own "
                     "labels")
    if args.simulate:
        from .simulate import ScenarioError, load_scenario

        try:
            load_scenario(args.simulate)
        except ScenarioError as error:
            parser.error(f"--simulate: {error}")
    config = AgentConfig(host=args.host, port=args.port, interval_s=args.interval,
                         backends=args.backends, simulate=args.simulate,
                         node_labels=dict(args.node_label), retry_s=args.retry,
                         ray=not args.no_ray, ray_address=args.ray_address,
                         ray_node_id=args.ray_node_id,
                         attribution_interval_s=args.attribution_interval,
                         task_id_cap=args.task_id_cap, names=not args.hide_names,
                         exposure=exposure_settings(args),
                         **agent_options(args, parser), **transfer_options(args))
    raise_open_file_limit()
    try:
        with terminate_as_interrupt():
            agent = Agent(config)
            try:
                asyncio.run(serve_forever(agent))
            finally:
                agent.release_simulation()
    except ExposureError as error:
        print(f"ray-accel agent: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"ray-accel: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs, so `finally` clauses clean up.

    The agent's event loop installs its own handlers once it runs; this covers the
    time before (building the simulated hardware, opening backends).
    """
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .demo.run import NO_WORKLOAD_DEVICES, run, workload_family
    from .simulate import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as error:
        parser.error(f"--scenario: {error}")
    if workload_family(scenario) is None:
        parser.error(f"--scenario: {scenario['name']} {NO_WORKLOAD_DEVICES}; run `ray-accel "
                     f"agent --simulate {scenario['name']}` to see its devices")
    if args.ready_file is not None and not args.ready_file.parent.is_dir():
        parser.error(f"--ready-file: folder {str(args.ready_file.parent)!r} does not exist")
    return run(args.scenario, args.port, args.ready_file)


def _list_scenarios(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .simulate import available_scenarios

    for name in available_scenarios():
        print(name)
    return 0


def _print_topology(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .attribution.ray_sources import RayNotFound, RaySourceError
    from .simulate import ScenarioError

    if args.address and args.simulate:
        parser.error("--address reads the cluster's agents; --simulate this machine: not both")
    try:
        sys.stdout.write(topo_command.run(args))
    except ScenarioError as error:
        parser.error(f"--simulate: {error}")
    except (RayNotFound, RaySourceError) as error:
        print(f"ray-accel topo: {error}", file=sys.stderr)
        return 1
    return 0


def _print_catalog(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .catalog_doc import render_markdown

    sys.stdout.write(render_markdown())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args.run(args, parser)


if __name__ == "__main__":
    sys.exit(main())
