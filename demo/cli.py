"""The `ray-accel demo` subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..exporter.cli_args import bounded_number
from ..exporter.config import DEFAULT_PORT


def register(commands: argparse._SubParsersAction) -> None:
    """Add `demo` to the `ray-accel` command line."""
    demo = commands.add_parser(
        "demo", help="run a Ray cluster and a workload on simulated accelerators, with the agent")
    demo.add_argument("--scenario", default="hgx-h200",
                      help="simulated hardware: a shipped scenario name or a JSON file")
    demo.add_argument("--port", type=bounded_number(int, 0, 65535, "--port"),
                      default=DEFAULT_PORT, help=f"agent port (default {DEFAULT_PORT})")
    demo.add_argument("--ready-file", type=Path, metavar="PATH",
                      help="write the demo's endpoints to PATH as JSON once everything serves")
    demo.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..exporter.simulate import ScenarioError, load_scenario
    from .run import NO_WORKLOAD_DEVICES, run, workload_family

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
