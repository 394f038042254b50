"""Builds a recording's scenario in a process of its own, whose memory goes with it.

Ten minutes of an eight-GPU node take about 50 MB to build at 1 s (200 MB at
0.1 s), and the Python heap does not hand that back: built in the agent, one
download would leave the agent that much bigger for good. The agent hands its
packed history to `python -m ray_accel.exporter.record.apart` on standard input
(pickled: the child is the agent's own code) and reads the answer from its
output: the status on the first line, then the JSON body.
"""

from __future__ import annotations

import copyreg
import io
import json
import logging
import pickle
import subprocess
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import BinaryIO

from .history import PackedRecording

log = logging.getLogger(__name__)

# Ten minutes at 1 s (600 frames) take about 3 s of CPU, a full history at 0.1 s (about
# 1,900 frames) about three times that; a child past this is stopped.
BUILD_TIMEOUT_S = 120.0


class BuildFailed(Exception):
    """The child process could not build the scenario: the message says why."""


def scenario_answer(packed: PackedRecording, last_s: float, keep_identities: bool,
                    call_costs: Mapping[str, list[float]]) -> tuple[int, bytes]:
    """(200, the scenario's JSON) of `packed`'s last `last_s` seconds, or (404, why none)."""
    from .scenario_file import NothingRecorded, build_scenario

    try:
        document = build_scenario(packed.unpacked(last_s), keep_identities=keep_identities,
                                  call_costs=dict(call_costs))
    except NothingRecorded as error:
        return 404, f"{error} in the last {last_s:g} s".encode()
    return 200, json.dumps(document, separators=(",", ":")).encode()


def build_apart(packed: PackedRecording, last_s: float, keep_identities: bool,
                call_costs: Mapping[str, list[float]]) -> tuple[int, bytes]:
    """`scenario_answer(...)` from a child process; here, where none can be started."""
    request = _pickled((packed, last_s, keep_identities, dict(call_costs)))
    try:
        child = subprocess.run([sys.executable, "-m", __name__], input=request,
                               capture_output=True, timeout=BUILD_TIMEOUT_S, check=False)
    except OSError as error:
        log.warning("building the recording in the agent: no process for it (%s)", error)
        return scenario_answer(packed, last_s, keep_identities, call_costs)
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"its build took over {BUILD_TIMEOUT_S:g} s") from None
    status, _, body = child.stdout.partition(b"\n")
    if child.returncode != 0 or not status.isdigit():
        why = child.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise BuildFailed(f"its build ended with status {child.returncode}: {why[0][:300]}")
    return int(status), body


def read_only(mapping: dict) -> MappingProxyType:
    """A read-only view of `mapping` (what a pickled one is made again with)."""
    return MappingProxyType(mapping)


def _pickled(value: object) -> bytes:
    """`value` pickled, its read-only mappings (a device's facts) as the dicts they show."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer)
    pickler.dispatch_table = {**copyreg.dispatch_table,
                              MappingProxyType: lambda proxy: (read_only, (dict(proxy),))}
    pickler.dump(value)
    return buffer.getvalue()


def _serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    status, body = scenario_answer(*pickle.load(stdin))
    stdout.write(b"%d\n" % status + body)
    stdout.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
