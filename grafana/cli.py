"""`ray-accel grafana`: write the boards and alert rules, or install the boards on a Ray head."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from .alerts.rules import DEFAULT_AGENT_JOB, AlertConfig
from .alerts.rules_file import DEFAULT_RUNBOOK_BASE
from .provisioning import RAY_DEFAULT_DASHBOARD_UID
from .thresholds import Thresholds, describe, load_file, parse_assignments

log = logging.getLogger(__name__)

#: Ray's own override of its default board's uid (RAY_GRAFANA_<NAME>_DASHBOARD_UID).
RAY_DEFAULT_UID_ENV = "RAY_GRAFANA_DEFAULT_DASHBOARD_UID"

DESCRIPTION = """\
Without --out: install the accelerator boards into the Grafana provisioning of
the Ray head on this host (found like the agent finds its node, or given with
--session-dir), so they appear in Ray's Grafana folder. Ray deletes that
folder when its dashboard starts; --watch puts the boards back.

With --out DIR: write the boards (DIR/dashboards/), a Grafana dashboards
provider (DIR/provisioning/dashboards/), and the Prometheus alert rules with
their promtool tests and thresholds, and the recording rules the Accelerators
tab reads for long ranges with theirs (DIR/prometheus/).
"""


def register(commands: argparse._SubParsersAction) -> None:
    """Add the `grafana` subcommand."""
    parser = commands.add_parser(
        "grafana", help="generate Grafana boards and Prometheus alert rules, or install the "
                        "boards on a Ray head", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write every generated file under DIR instead of installing")
    parser.add_argument("--dashboards-path", metavar="PATH",
                        help="with --out: where Grafana will read the boards, written into "
                             "the provider file (default: DIR/dashboards, absolute)")
    parser.add_argument("--ray-dashboard-uid",
                        default=os.environ.get(RAY_DEFAULT_UID_ENV) or RAY_DEFAULT_DASHBOARD_UID,
                        metavar="UID", help="uid of Ray's default board, for links to it "
                                            f"(default: ${RAY_DEFAULT_UID_ENV} or "
                                            f"{RAY_DEFAULT_DASHBOARD_UID})")
    ray = parser.add_argument_group("installing on a Ray head")
    ray.add_argument("--session-dir", type=Path, metavar="DIR",
                     help="the Ray session dir (default: found from the Ray node on this host)")
    ray.add_argument("--address", metavar="ADDR",
                     help="GCS address of the cluster, to find its node on this host")
    ray.add_argument("--node-id", metavar="HEX", help="which Ray node on this host")
    ray.add_argument("--watch", action="store_true",
                     help="keep running and reinstall the boards whenever they disappear")
    ray.add_argument("--watch-interval", type=float, default=5.0, metavar="SECONDS",
                     help="how often --watch checks (default 5 s)")
    alerts = parser.add_argument_group("alert rules")
    alerts.add_argument("--alert-threshold", action="append", default=[], metavar="NAME=VALUE",
                        help="override one threshold (repeatable); see --list-thresholds")
    alerts.add_argument("--thresholds", type=Path, metavar="FILE",
                        help="a YAML mapping of threshold names to values")
    alerts.add_argument("--agent-job", default=DEFAULT_AGENT_JOB, metavar="NAME",
                        help=f"Prometheus job the agents are scraped under (default "
                             f"{DEFAULT_AGENT_JOB})")
    alerts.add_argument("--runbook-url", default=DEFAULT_RUNBOOK_BASE, metavar="URL",
                        help="where docs/alerts.md is served; each rule links to its section "
                             f"(default {DEFAULT_RUNBOOK_BASE})")
    alerts.add_argument("--list-thresholds", action="store_true",
                        help="print every threshold with its default and exit")
    parser.set_defaults(run=run)


def _thresholds(args: argparse.Namespace) -> Thresholds:
    overrides = load_file(args.thresholds) if args.thresholds else {}
    overrides.update(parse_assignments(args.alert_threshold))
    return Thresholds().with_overrides(overrides)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Carry out `ray-accel grafana`."""
    if args.list_thresholds:
        for name, kind, default, help_text in describe():
            print(f"{name:30} {default:>8}  {kind.value:8}  {help_text}")
        return 0
    if args.watch_interval <= 0:
        parser.error("--watch-interval must be positive")
    try:
        thresholds = _thresholds(args)
    except ValueError as error:
        parser.error(str(error))
    if args.out is not None:
        from .generate import DASHBOARDS, Output, files, write

        if args.watch or args.session_dir or args.address:
            parser.error("--out writes files; --watch, --session-dir and --address install "
                         "on a Ray head instead")
        out = args.out.resolve()
        output = Output(alerts=AlertConfig(thresholds, args.agent_job),
                        runbook_base=args.runbook_url,
                        dashboards_path=args.dashboards_path or str(out / DASHBOARDS),
                        ray_default_uid=args.ray_dashboard_uid)
        for path in write(out, files(output)):
            print(path)
        return 0
    return _install(args)


def _install(args: argparse.Namespace) -> int:
    from .generate import board_files
    from .install import RayGrafana, find_session_dir, install, watch

    session_dir = args.session_dir
    if session_dir is None:
        from ray_accel.exporter.attribution.ray_sources import RayNotFound, RaySourceError

        try:
            session_dir = find_session_dir(args.address, args.node_id)
        except (RayNotFound, RaySourceError) as error:
            print(f"ray-accel grafana: no Ray node found ({error}); pass --session-dir or "
                  "--out", file=sys.stderr)
            return 1
    target = RayGrafana.for_session(session_dir)
    boards = {Path(name).name: text for name, text in
              board_files(args.ray_dashboard_uid).items()}
    if not args.watch:
        for path in install(target, boards):
            print(path)
        return 0
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"watching {target.grafana_dir}", flush=True)
    watch(target, boards, stop, args.watch_interval,
          on_install=lambda paths: print(f"installed {len(paths)} file(s) in "
                                         f"{target.grafana_dir}", flush=True))
    return 0
