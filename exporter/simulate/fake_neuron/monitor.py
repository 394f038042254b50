"""The simulated ``neuron-monitor`` program: ``neuron-monitor [-c CONFIG] [--verbose N]``.

Like the real tool it reads the JSON configuration (global ``period`` such as
"1s" or "500ms", ``neuron_runtimes[].tag_filter`` and ``metrics[].type``,
``system_metrics[].type``; no file: every group every 5 s) and writes one
complete JSON report per line to stdout, once per period. What it reports
comes from the ``neuron`` section of the scenario saved at
$RAY_ACCEL_FAKE_NEURON_SCENARIO, re-read for every report, so changes to the
running simulated hardware show in the next report. The section's
``faults`` make it leave groups out, fail them, print malformed lines, stop
reporting (``silent``) or exit after some reports.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..contexts import pid_alive
from ..neuron_scenario import RUNTIME_GROUPS, SYSTEM_GROUPS
from ..saved import SavedScenario, scenario_time
from .reports import ReportBuilder

SCENARIO_ENV = "RAY_ACCEL_FAKE_NEURON_SCENARIO"
DEFAULT_PERIOD_S = 5.0
_PERIOD = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_period(text: Any) -> float:
    """A neuron-monitor period ("1s", "500ms", "2m") in seconds."""
    match = _PERIOD.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"invalid period {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def read_config(path: str | None) -> tuple[float, list[str], list[str], str | None]:
    """(period, runtime groups, system groups, tag filter) from a configuration file."""
    if path is None:
        return DEFAULT_PERIOD_S, list(RUNTIME_GROUPS), list(SYSTEM_GROUPS), None
    with open(path, encoding="utf-8") as config_file:
        config = json.load(config_file)
    period = parse_period(config.get("period", "5s"))
    runtime_groups: list[str] = []
    tag_filter = None
    for runtime in config.get("neuron_runtimes") or ():
        tag_filter = runtime.get("tag_filter", tag_filter)
        for metric in runtime.get("metrics") or ():
            if metric.get("type") in RUNTIME_GROUPS and metric["type"] not in runtime_groups:
                runtime_groups.append(metric["type"])
    system_groups = [m["type"] for m in config.get("system_metrics") or ()
                     if m.get("type") in SYSTEM_GROUPS]
    return period, runtime_groups, system_groups, tag_filter


def main(argv: Sequence[str] | None = None) -> int:
    """Runs until killed (or until the scenario's faults make it exit)."""
    parser = argparse.ArgumentParser(prog="neuron-monitor")
    parser.add_argument("-c", "--config-file")
    parser.add_argument("--verbose", type=int, default=0)
    args = parser.parse_args(argv)
    scenario_path = os.environ.get(SCENARIO_ENV, "")
    if not scenario_path:
        print(f"neuron-monitor (simulated): {SCENARIO_ENV} is not set", file=sys.stderr)
        return 2
    saved = SavedScenario(pathlib.Path(scenario_path), recheck_s=0)  # each report sees changes
    try:
        period, runtime_groups, system_groups, tag_filter = read_config(args.config_file)
        document = saved.document()
    except (OSError, ValueError, KeyError) as error:
        print(f"neuron-monitor (simulated): {error}", file=sys.stderr)
        return 2
    builder = ReportBuilder(runtime_groups, system_groups, tag_filter, scenario_time(document))
    reports = 0
    last = time.monotonic()
    while True:
        document = saved.document()  # the last good copy while the file is being replaced
        section = document.get("scenario", {}).get("neuron")
        if section is None:
            print("neuron-monitor (simulated): the scenario has no neuron section",
                  file=sys.stderr)
            return 1
        faults = section.get("faults") or {}
        limit = faults.get("exit_after_reports")
        if limit is not None and reports >= limit:
            print(f"neuron-monitor (simulated): exiting after {reports} reports",
                  file=sys.stderr)
            return 1
        if not faults.get("silent"):
            now = time.monotonic()
            report = builder.build(section, scenario_time(document), now - last, pid_alive)
            last = now
            lines = ['{"neuron_runtime_data": [{"pid": '] if faults.get("malformed_lines") else []
            lines.append(json.dumps(report, separators=(",", ":")))
            try:
                sys.stdout.write("\n".join(lines) + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                return 0
            reports += 1
        time.sleep(period)


if __name__ == "__main__":
    sys.exit(main())
