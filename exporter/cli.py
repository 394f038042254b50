"""The `ray-accel` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import entry_points

from . import topo_command
from .agent import Agent, serve_forever
from .attribution.guard import DEFAULT_TASK_ID_CAP
from .backends import available_backends
from .catalog import SLOW_READ_INTERVAL_S
from .cli_args import bounded_number, label_pair, node_label_problem, scenario_name
from .config import DEFAULT_HOST, DEFAULT_INTERVAL_S, DEFAULT_PORT, AgentConfig
from .exposure import ExposureError, add_exposure_arguments, exposure_settings
from .heap import tune_malloc
from .python_gc import tune_gc
from .record import command as record_command
from .serving import raise_open_file_limit

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
# Subcommands the dashboard module, the boards and the demo add (setup: pyproject.toml).
COMMAND_PLUGINS = "ray_accel.commands"


# A subcommand's function: its arguments and parser in, its exit status out.
Command = Callable[[argparse.Namespace, argparse.ArgumentParser], int]


def build_parser(plugins: bool = True) -> argparse.ArgumentParser:
    """The whole command line; `plugins=False` leaves out the entry-point subcommands."""
    parser = argparse.ArgumentParser(
        prog="ray-accel", description="Accelerator observability for Ray clusters."
    )
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    agent = commands.add_parser("agent", help="run the per-node agent")
    agent.add_argument("--host", default=DEFAULT_HOST,
                       help=f"address to listen on (default {DEFAULT_HOST})")
    agent.add_argument("--port", type=bounded_number(int, 0, 65535, "--port"),
                       default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
    agent.add_argument("--interval", type=bounded_number(float, MIN_INTERVAL_S, MAX_INTERVAL_S,
                                                          "--interval"),
                       default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                       help=f"sampling interval (default {DEFAULT_INTERVAL_S:g} s)")
    agent.add_argument("--slow-read-interval",
                       type=bounded_number(float, 0, 3600, "--slow-read-interval"),
                       default=SLOW_READ_INTERVAL_S, metavar="SECONDS",
                       help="how often values marked slow cadence in docs/metrics.md (energy, "
                            "error counters, link states) are read, each device at its own "
                            f"point of it (default {SLOW_READ_INTERVAL_S:g} s; 0: every cycle)")
    agent.add_argument("--simulate", metavar="SCENARIO", type=scenario_name,
                       help="run on simulated hardware: a shipped scenario name or a JSON file")
    agent.add_argument("--retry", type=bounded_number(float, 0.1, 3600, "--retry"),
                       default=30.0, metavar="SECONDS",
                       help="how often to retry a backend whose driver is missing (default 30 s)")
    agent.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                       help="vendor backend to load (repeatable; default: every installed one)")
    agent.add_argument("--node-label", action="append", type=label_pair, default=[],
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
                     type=bounded_number(float, 0.1, 3600, "--attribution-interval"),
                     default=2.0, metavar="SECONDS",
                     help="how often to refresh Ray workers and tasks (default 2 s)")
    ray.add_argument("--task-id-cap", type=bounded_number(int, 0, 1_000_000, "--task-id-cap"),
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
    record.set_defaults(run=interruptible(record_command.run))
    register(commands)  # deploy, undeploy, status, sd-file
    register_transfers(commands)  # transfers
    if plugins:
        _register_plugins(commands)  # dashboard, demo, grafana
    return parser


def _runs_the_agent(argv: Sequence[str] | None) -> bool:
    """Whether the command line asks for `agent`: its process then loads no plugin's modules.

    The dashboard, demo and boards would add tens of modules the agent never uses
    to the resident memory of every node's agent.
    """
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--log-level")
    first.add_argument("command", nargs="?")
    known, _ = first.parse_known_args(argv)
    return known.command == "agent"


def _register_plugins(commands: argparse._SubParsersAction) -> None:
    """Subcommands other parts of the package (or other packages) add, in name order."""
    for plugin in sorted(entry_points(group=COMMAND_PLUGINS), key=lambda point: point.name):
        plugin.load()(commands)


def _run_agent(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .cluster.cli import agent_options
    from .transfers_command import transfer_options

    if args.backends:
        unknown = sorted(set(args.backends) - set(available_backends()))
        if unknown:
            parser.error(f"unknown backend(s) {', '.join(unknown)}; "
                         f"installed: {', '.join(available_backends())}")
    labels_wrong = node_label_problem(args.node_label)
    if labels_wrong:
        parser.error(labels_wrong)
    if args.simulate:
        from .simulate import ScenarioError, load_scenario

        try:
            load_scenario(args.simulate)
        except ScenarioError as error:
            parser.error(f"--simulate: {error}")
    config = AgentConfig(host=args.host, port=args.port, interval_s=args.interval,
                         slow_read_interval_s=args.slow_read_interval,
                         backends=args.backends, simulate=args.simulate,
                         node_labels=dict(args.node_label), retry_s=args.retry,
                         ray=not args.no_ray, ray_address=args.ray_address,
                         ray_node_id=args.ray_node_id,
                         attribution_interval_s=args.attribution_interval,
                         task_id_cap=args.task_id_cap, names=not args.hide_names,
                         exposure=exposure_settings(args),
                         **agent_options(args, parser), **transfer_options(args))
    raise_open_file_limit()
    tune_malloc()
    tune_gc()
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


def interruptible(run: Command) -> Command:
    """`run` where Ctrl-C or SIGTERM ends the command with a line and status 130 (its
    `finally` clauses and context managers cleaning up), not a traceback."""
    def interrupted_quietly(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        try:
            with terminate_as_interrupt():
                return run(args, parser)
        except KeyboardInterrupt:
            print(f"{parser.prog}: interrupted", file=sys.stderr)
            return 130

    return interrupted_quietly


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
    parser = build_parser(plugins=not _runs_the_agent(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args.run(args, parser)


if __name__ == "__main__":
    sys.exit(main())
