"""`ray-accel record`: sample this node (or ask an agent for its history) and save a scenario.

Replay the file with `ray-accel agent --simulate FILE`. The output file is
never overwritten: an existing one is refused, and nothing is written when no
backend found a device.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import time
import urllib.error
from typing import Any
from urllib.parse import urlencode

from ..cli_args import bounded_number, scenario_name
from .history import History, Recording

DEFAULT_DURATION_S = 60.0
DEFAULT_INTERVAL_S = 1.0
MAX_LAST_S = 3600.0
FETCH_TIMEOUT_S = 30.0  # for each read of the answer
FETCH_TOTAL_S = 300.0  # for the whole answer (about 1.3 MB for 10 minutes of 8 GPUs)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """Seconds of "90", "90s", "10m" or "1h"; ValueError with the reason otherwise."""
    found = _DURATION.match(text.strip())
    if not found:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 10m, 1h)")
    seconds = float(found.group(1)) * _UNIT_S[found.group(2)]
    if not 1 <= seconds <= MAX_LAST_S:
        raise ValueError(f"{text!r} is outside 1 s - {MAX_LAST_S:g} s")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=bounded_number(float, 0.01, 86400, "--duration"),
                        default=DEFAULT_DURATION_S,
                        help="seconds to record (default %(default)g)")
    parser.add_argument("--interval", type=bounded_number(float, 0.01, 3600, "--interval"),
                        default=DEFAULT_INTERVAL_S,
                        help="seconds between samples (default %(default)g)")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="scenario file to write (default recorded-<UTC time>.json); "
                             "an existing file is not overwritten")
    parser.add_argument("--keep-identities", action="store_true",
                        help="keep GPU UUIDs, serials and pids instead of placeholders")
    parser.add_argument("--simulate", metavar="SCENARIO", type=scenario_name, default=None,
                        help="record simulated hardware playing SCENARIO")
    parser.add_argument("--from-agent", metavar="URL", default=None,
                        help="save the recent history an agent keeps (e.g. http://node:9478)")
    parser.add_argument("--last", default="10m",
                        help="with --from-agent: how much of its history (default %(default)s)")


def record_node(duration_s: float, interval_s: float, simulate: str | None = None) -> Recording:
    """Sample this node's backends every `interval_s` for `duration_s`; the frames."""
    from ..backends import load_backends
    from ..sampler import Sampler
    from ..store import SnapshotStore

    hardware = None
    if simulate:
        from ..simulate import SimulatedHardware

        hardware = SimulatedHardware.start(simulate)
        hardware.activate()
    cycles = max(round(duration_s / interval_s) + 1, 2)
    history = History(max_age_s=duration_s + 10 * interval_s, max_bytes=2**40)
    sampler = Sampler(load_backends(None), SnapshotStore(), interval_s=interval_s)
    try:
        next_at = time.monotonic()
        for _ in range(cycles):
            history.add(sampler.run_cycle())
            next_at += interval_s
            time.sleep(max(next_at - time.monotonic(), 0.0))
    finally:
        sampler.stop()
        if hardware is not None:
            hardware.close()
    return history.recording()


class FetchFailed(Exception):
    """The agent's recording could not be had; the message says why."""


def fetch_from_agent(url: str, last_s: float, keep_identities: bool) -> dict[str, Any]:
    """The scenario an agent builds from its history of the last `last_s` seconds;
    FetchFailed, with the agent's own reason where it gave one, if there is none."""
    import http.client  # only this command's fetch needs it (the agent never loads it)

    from ..agent_client import open_agent

    query = {"last": f"{last_s:g}s"}
    if keep_identities:
        query["identities"] = "keep"
    deadline = time.monotonic() + FETCH_TOTAL_S
    try:
        with open_agent(f"{url.rstrip('/')}/api/v1/record?{urlencode(query)}",
                        FETCH_TIMEOUT_S) as answer:
            body = bytearray()
            while chunk := answer.read(2**16):
                body += chunk
                if time.monotonic() > deadline:
                    raise FetchFailed(f"the answer took longer than {FETCH_TOTAL_S:g} s")
    except urllib.error.HTTPError as error:
        raise FetchFailed(f"HTTP {error.code}: {_reason(error.read())}") from None
    except (OSError, urllib.error.URLError, http.client.HTTPException) as error:
        raise FetchFailed(f"{type(error).__name__}: {error}") from None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise FetchFailed("it answered something that is not JSON (is it an agent?)") from None
    if not is_scenario_document(document):
        raise FetchFailed("it answered JSON that is not a scenario document (no device list)")
    return document


def is_scenario_document(document: Any) -> bool:
    """Whether `document` has the form of every scenario document (docs/simulation.md): an
    object with a device list (other vendors' devices are in sections of their own)."""
    return isinstance(document, dict) and isinstance(document.get("devices"), list)


def _reason(body: bytes) -> str:
    """An agent's JSON error's message, or the start of whatever else it answered."""
    try:
        return str(json.loads(body)["error"])[:300]
    except (ValueError, KeyError, TypeError, RecursionError):
        return body[:100].decode("utf-8", "replace") or "no reason given"


def write_new(path: pathlib.Path, document: dict[str, Any]) -> None:
    """Write `document` to `path`, which must not exist yet (atomic: no half file)."""
    text = json.dumps(document, indent=1) + "\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    try:
        os.link(temporary, path)  # fails if `path` appeared meanwhile
    finally:
        temporary.unlink()


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The `record` command: 0 written, 1 nothing to record or the agent failed."""
    from ..backends.calls import CALL_CPU_S
    from ..simulate import load_scenario
    from .scenario_file import (
        NOT_RECORDED,
        NothingRecorded,
        build_scenario,
        describe_skipped,
        device_count,
        skipped_families,
    )

    if args.from_agent and args.simulate:
        parser.error("--from-agent saves an agent's history; --simulate records here: not both")
    out = args.out or pathlib.Path(time.strftime("recorded-%Y%m%dT%H%M%SZ.json", time.gmtime()))
    if out.exists():
        parser.error(f"--out: {str(out)!r} exists; give another file (it is not overwritten)")
    if not out.parent.is_dir():
        parser.error(f"--out: folder {str(out.parent)!r} does not exist")
    try:
        if args.from_agent:
            document = fetch_from_agent(args.from_agent, parse_duration(args.last),
                                        args.keep_identities)
            load_scenario(document)
        else:
            if args.simulate:
                load_scenario(args.simulate)
            recording = record_node(args.duration, args.interval, args.simulate)
            document = build_scenario(recording, keep_identities=args.keep_identities,
                                      call_costs=dict(CALL_CPU_S))
            if skipped := skipped_families(recording):
                print(f"ray-accel record: not recorded: {describe_skipped(skipped)} "
                      f"({NOT_RECORDED})", file=sys.stderr)
    except FetchFailed as error:
        print(f"ray-accel record: {args.from_agent}: {error}; nothing written", file=sys.stderr)
        return 1
    except ValueError as error:  # a bad --last, or ScenarioError
        parser.error(str(error))
    except NothingRecorded as error:
        print(f"ray-accel record: {error}; nothing written", file=sys.stderr)
        return 1
    try:
        write_new(out, document)
    except OSError as error:
        print(f"ray-accel record: cannot write {out}: {error}", file=sys.stderr)
        return 1
    print(f"recorded {device_count(document)} device(s) to {out}; replay: "
          f"ray-accel agent --simulate {out}")
    return 0
