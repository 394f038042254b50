"""One scenario's record-and-replay round trip, in its own process.

The fake NVML binds to one process once, so each scenario runs here:
`python tests/support/record_roundtrip.py SOURCE DURATION_S OUT.json [T ...]` records
SOURCE for DURATION_S at 1 s, builds the scenario (identities kept, so series
labels match), then samples the recorded scenario frozen at each recording time
T and the original frozen at the same scenario time (T offset by when the
recording started) and on either side by as much as the recorder's samples
there were apart (1 s on schedule), and writes every series to OUT.json for
the test to compare.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import sys
import time
from typing import Any

from ray_accel.exporter.backends import load_backends
from ray_accel.exporter.record.command import record_node
from ray_accel.exporter.record.frames import series_of
from ray_accel.exporter.record.scenario_file import build_scenario, recording_start
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import SimulatedHardware, load_scenario
from ray_accel.exporter.simulate.amd_scenario import vendor_of
from ray_accel.exporter.store import SnapshotStore

STALE_AT_ENV = "RECORD_ROUNDTRIP_STALE_AT_S"
MAX_CYCLES = 8
QUIET_CYCLES = 2  # on a loaded machine a device can be late for a cycle, its GPM with it
FIRST_DEVICES_S = 30.0  # how long a fresh agent may take to list any device


def backends_of(scenario: dict[str, Any]) -> list[str]:
    """The backends reading the scenario's devices: "nvidia", "amd", "gaudi", "tpu", "neuron"."""
    found = {vendor_of(device) for device in scenario["devices"]}
    if (scenario.get("gaudi") or {}).get("devices"):
        found.add("gaudi")
    if (scenario.get("tpu") or {}).get("chips"):
        found.add("tpu")
    if scenario.get("neuron"):
        found.add("neuron")
    return sorted(found)


def series_at(hardware: SimulatedHardware, scenario: dict[str, Any], t: float,
              errors: dict[str, dict[str, str]] | None = None) -> dict[str, float]:
    """Every series of an agent reading `scenario` frozen at t (its cycles merged, from two
    until two in a row bring no series the others lacked); into `errors`, if given, each
    device's failed calls of those cycles (call -> kind)."""
    frozen = copy.deepcopy(scenario)
    frozen["freeze_at_s"] = t
    hardware.update(frozen)
    # every value every cycle: a fresh agent on the slow cadence reads a device's slow
    # values (energy, errors, limits) only at that device's point of the interval
    sampler = Sampler(load_backends(backends_of(scenario)), SnapshotStore(), interval_s=1.0,
                      slow_read_interval_s=0.0)
    found: dict[str, float] = {}
    try:
        # Two cycles (GPM needs two samples), and more while a busy CPU leaves some
        # device's bounded discovery unfinished (a placeholder stands for it), a device
        # down, or series still to come (a device late for a cycle; Gaudi NIC counters,
        # read a few ports a cycle within a time budget).
        quiet = 0  # cycles in a row that added no series
        listed_by = time.monotonic() + FIRST_DEVICES_S
        cycle = 0
        while cycle < MAX_CYCLES:
            known = len(found)
            samples = sampler.run_cycle().devices
            if not samples and time.monotonic() < listed_by:
                time.sleep(0.2)  # a backend that lists its devices late (neuron-monitor's
                continue  # first report comes a period after it starts)
            if all(s.stale for s in samples) and time.monotonic() < listed_by:
                continue  # no device answered yet (a TPU host's one read for all its chips
                # on a loaded machine): the cycle waited for them, it does not count
            cycle += 1
            for sample in samples:
                for key, value in series_of(sample):
                    found[json.dumps([sample.device.uuid, *key])] = value
                found[json.dumps([sample.device.uuid, "up"])] = float(sample.up)
                if errors is not None:
                    errors.setdefault(sample.device.uuid, {}).update(sample.errors)
            placeholders = [s.device.uuid for s in samples if s.device.model == "unknown"]
            # a device down may be one whose library did not answer in time (a TPU
            # runtime's RPC on a loaded machine): it is given the cycles left to answer
            answered = all(s.up for s in samples)
            quiet = quiet + 1 if len(found) == known and answered else 0
            if cycle >= 2 and not placeholders and quiet >= QUIET_CYCLES:
                break
            for uuid in placeholders:
                found.pop(json.dumps([uuid, "up"]), None)
    finally:
        sampler.stop()
    return found


def sample_gap(starts: list[float], t: float) -> float:
    """The longest time between the recording's samples within 2 s of t (1 s on schedule)."""
    near = [b - a for a, b in itertools.pairwise(starts) if b >= t - 2 and a <= t + 2]
    return max([1.0, *near])


def stale_at(hardware: SimulatedHardware, scenario: dict[str, Any], t: float,
             cycles: int = 8, interval_s: float = 0.5) -> dict[str, bool]:
    """Device uuid -> stale, after `cycles` cycles of an agent reading `scenario` frozen at t."""
    frozen = copy.deepcopy(scenario)
    frozen["freeze_at_s"] = t
    hardware.update(frozen)
    sampler = Sampler(load_backends(backends_of(scenario)), SnapshotStore(),
                      interval_s=interval_s, slow_read_interval_s=0.0)
    try:
        for _ in range(cycles):
            snapshot = sampler.run_cycle()
            time.sleep(interval_s)
    finally:
        sampler.stop()
    return {sample.device.uuid: sample.stale for sample in snapshot.devices}


def main(source: str, duration_s: float, out: str, times: list[float]) -> None:
    hardware = SimulatedHardware.start(source)
    hardware.activate()
    from ray_accel.exporter.backends.calls import CALL_CPU_S

    recording = record_node(duration_s, 1.0)
    offset_s = recording_start(recording) - hardware.epoch
    recorded = build_scenario(recording, keep_identities=True, call_costs=dict(CALL_CPU_S))
    original = load_scenario(source)
    original.pop("name", None)
    replay = json.loads(json.dumps(recorded))
    result = {"offset_s": offset_s, "scenario": recorded, "original": {}, "replay": {}}
    started = time.monotonic()
    starts = [frame.taken_at - recording_start(recording) for frame in recording.frames]
    for t in times:
        # The original around t, as far as the recorder's samples there were apart (1 s
        # on schedule, more where a busy CPU made it skip cycles): what it could resolve.
        gap = sample_gap(starts, t)
        result.setdefault("gaps", {})[str(t)] = gap
        errors: dict[str, dict[str, dict[str, str]]] = {"original": {}, "replay": {}}
        for side, around in (("-1", -gap), ("+0", 0.0), ("+1", gap)):
            result["original"][f"{t}{side}"] = series_at(
                hardware, original, max(offset_s + t + around, 0.0),
                errors["original"] if side == "+0" else None)
        result["replay"][str(t)] = series_at(hardware, replay, t, errors["replay"])
        result.setdefault("errors", {})[str(t)] = errors
    result["compare_s"] = time.monotonic() - started
    if STALE_AT_ENV in os.environ:  # a hang: which devices stay stale at that time
        t = float(os.environ[STALE_AT_ENV])
        result["stale_original"] = stale_at(hardware, original, offset_s + t)
        result["stale_replay"] = stale_at(hardware, replay, t)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    hardware.close()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3], [float(t) for t in sys.argv[4:]])
    sys.stdout.flush()
    os._exit(0)  # calls a played hang holds must not keep the process alive
