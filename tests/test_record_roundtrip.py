"""Record each shipped scenario (NVIDIA, AMD, Gaudi, TPU, Neuron) for a minute, replay it,
compare every series.

Each scenario runs in its own process (tests/support/record_roundtrip.py), all at once,
so the module takes about the minute of recording plus the comparisons.
Both agents are compared at the same scenario times with time frozen, so the
values are exact rather than racing the clock. Stated tolerances:

- gauges: the replayed value lies within the range the original takes over
  [t - g, t + g], g the time between the recorder's samples there (1 s on
  schedule, more where a busy CPU made it skip cycles: it cannot resolve
  finer), widened by
  max(0.02, 1 %) of the value plus one NVML unit where NVML answers whole
  numbers (1 °C, 1 MHz: the recorder fits whole-number readings within one unit;
  AMD residency ratios, counted in whole accumulator ticks, within one percent);
- counters (energy, NVLink and XGMI bytes, errors): within 0.5 % of the original at t,
  and each increment between comparison times within 2 %; PCIe byte counters,
  which wrap at 2^32 as on a real H200, within 64 MiB modulo 2^32, widened
  where their rate ramps by as far as the counter there bends away from a
  straight line over one recorder's interval (an eighth of its second
  difference over [t - g, t + g]: the replay spreads each interval's bytes
  evenly, the recorder seeing no finer), and not replayed for a GPU without
  GPM PCIe rates (the agent recording at 1 s could not tell their wraps and
  left them out; the original here, read cycle after cycle at one frozen
  time, has them);
- the same set of series (and of devices up) on both; the age of the agent's
  slow-cadence values is its own timing and is not compared;
- the calls that fail for good (not supported, not implemented: what a
  recorder writes as a key left out or a rule for the whole replay) fail alike;
- events: XID codes and times within 1.5 s, the lost GPU's time within 1.5 s,
  and gb200-nvl72 tray 7's fabric degradation at 60 s within 1.5 s (amdsmi has
  no XID events: AMD ECC errors are counters, compared as above; a lost AMD GPU
  is in tests/test_record_faults.py).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from ray_accel.exporter.backends.nvidia.interconnect import PCIE_IO
from ray_accel.exporter.catalog import Kind, spec
from ray_accel.exporter.record.scenario_file import RECORDERS
from ray_accel.exporter.record.series import SLOW_VALUES_AGE
from ray_accel.exporter.simulate import load_scenario

SCENARIOS = ("hgx-h200", "l4-pcie", "a100-mig", "gpu-lost", "unsupported", "rtx-pro-6000",
             "hgx-b200", "gb200-nvl72?tray=7", "mi300x-8", "mi355x-8", "mixed", "gaudi2-8",
             "tpu-v5e-8", "trn1-32xl")
DURATION_S = 64
TIMES = (5.0, 21.0, 40.0, 62.0)
HELPER = pathlib.Path(__file__).resolve().parent / "support" / "record_roundtrip.py"
EVENT_TOLERANCE_S = 1.5
PCIE_TOLERANCE_BYTES = 64 * 2**20
# failure kinds that last (the device cannot do it), as opposed to faults of the moment
LASTING_KINDS = frozenset().union(*(r.absent_kinds - r.lost_kinds for r in RECORDERS))


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("roundtrip")
    running = {}
    for source in SCENARIOS:
        out = folder / (source.replace("?", "_").replace("=", "") + ".json")
        log = open(out.with_suffix(".log"), "w")  # noqa: SIM115 - closed below
        running[source] = (out, log, subprocess.Popen(
            [sys.executable, str(HELPER), source, str(DURATION_S), str(out),
             *map(str, TIMES)], stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}))
    results = {}
    for source, (out, log, process) in running.items():
        code = process.wait(timeout=900)
        log.close()
        assert code == 0, f"{source}: {out.with_suffix('.log').read_text()[-3000:]}"
        results[source] = json.loads(out.read_text())
    return results


def _metric(key: list) -> str:
    return key[-2] if key[1] in ("d", "l", "p") else ""


def _is_counter(key: list) -> bool:
    metric = _metric(key)
    return bool(metric) and spec(metric).kind is Kind.COUNTER


def _is_pcie_bytes(key: list) -> bool:
    return key[1] == "l" and key[2] == "pcie"


def _nvml_unit(key: list) -> float:
    """One step of the whole number NVML answers for the metric, in base units."""
    metric = _metric(key)
    return {"Cel": 1.0, "Hz": 1e6}.get(spec(metric).unit, 0.0) if metric else 0.0


def _close(a: float, b: float, relative: float, absolute: float = 0.0) -> bool:
    return abs(a - b) <= max(absolute, relative * max(abs(a), abs(b)))


def _is_agent_timing(key: list) -> bool:
    """How old the agent's slow-cadence values are: its own timing, not a device value."""
    return _metric(key) == SLOW_VALUES_AGE


def _untold_pcie_bytes(trip: dict) -> set[str]:
    """UUIDs of the GPUs whose recording has no GPM PCIe rates: recorded at 1 s, the agent
    could not tell their 32-bit PCIe counters' wraps and left them out (docs/backends.md),
    so the recording has no PCIe byte counters to replay."""
    return {device["uuid"] for device in trip["scenario"].get("devices", ())
            if "pcie_rx_per_sec" not in device.get("gpm", {})
            and "198" not in device.get("fields", {})}


def _wrapped_distance(a: float, b: float) -> float:
    """How far apart two 32-bit counters are, either way round."""
    wrapped = (a - b) % 2**32
    return min(wrapped, 2**32 - wrapped)


def _bend(around: list[dict], name: str) -> float:
    """How far the counter `name` strays from a straight line within one recorder's interval
    at t, from the original at t - g, t and t + g: for a rate that ramps by a per second,
    a g^2 / 8 at most, an eighth of the second difference (wraps told apart)."""
    if not all(name in one for one in around):
        return 0.0
    before, at, after = (one[name] for one in around)
    return _wrapped_distance(before + after, 2 * at) / 8


def _mismatches(trip: dict) -> list[str]:
    found = []
    previous: tuple[dict, dict] | None = None
    untold = _untold_pcie_bytes(trip)
    for t in map(str, TIMES):
        replay = trip["replay"][t]
        around = [trip["original"][f"{t}{d}"] for d in ("-1", "+0", "+1")]
        original = {name: value for name, value in around[1].items()
                    if not (_is_pcie_bytes(key := json.loads(name)) and key[0] in untold)}
        if set(replay) != set(original):
            found.append(f"t={t}: only original {sorted(set(original) - set(replay))[:5]}, "
                         f"only replay {sorted(set(replay) - set(original))[:5]}")
        for name in sorted(set(replay) & set(original)):
            key, got, want = json.loads(name), replay[name], original[name]
            if _is_agent_timing(key):
                continue
            if _is_pcie_bytes(key):
                ok = _wrapped_distance(got, want) <= PCIE_TOLERANCE_BYTES + _bend(around, name)
            elif _is_counter(key):
                ok = _close(got, want, 0.005, 1.0)
                if ok and previous is not None and name in previous[0] and name in previous[1]:
                    ok = _close(got - previous[0][name], want - previous[1][name], 0.02, 1.0)
            else:
                values = [one[name] for one in around if name in one]
                low, high = min(values), max(values)
                slack = max(0.02, 0.01 * max(abs(low), abs(high))) + _nvml_unit(key)
                ok = low - slack <= got <= high + slack
            if not ok:
                found.append(f"t={t} {name}: replay {got}, original {want}")
        previous = (replay, original)
    return found


@pytest.mark.parametrize("source", SCENARIOS)
def test_replay_matches_every_series(round_trips: dict[str, dict], source: str) -> None:
    trip = round_trips[source]
    series = len(trip["replay"][str(TIMES[0])])
    assert series > 10, f"{source}: only {series} series compared"
    mismatches = _mismatches(trip)
    assert not mismatches, f"{source}: {len(mismatches)} mismatches:\n" + "\n".join(
        mismatches[:20])


def _lasting_failures(errors: dict[str, dict[str, str]]) -> set[tuple[str, str, str]]:
    """(device, call, kind) of each call that failed for good. The agent's PCIe counters
    are left out (`pcie_io`) on the cycles before GPM has measured the link, whatever the
    device can do: that is the agent's first cycles, not a failure of the device."""
    return {(uuid, call, kind) for uuid, calls in errors.items() for call, kind in calls.items()
            if kind in LASTING_KINDS and call != PCIE_IO}


@pytest.mark.parametrize("source", SCENARIOS)
def test_calls_that_fail_for_good_fail_alike_on_the_replay(round_trips: dict[str, dict],
                                                           source: str) -> None:
    for t, errors in round_trips[source]["errors"].items():
        original, replay = (_lasting_failures(errors[side]) for side in ("original", "replay"))
        assert replay == original, (f"t={t}: only original {sorted(original - replay)[:5]}, "
                                    f"only replay {sorted(replay - original)[:5]}")


def _keyframe_counts(value: object) -> list[int]:
    if isinstance(value, dict):
        if "keyframes" in value:
            return [len(value["keyframes"])]
        return [n for one in value.values() for n in _keyframe_counts(one)]
    if isinstance(value, list):
        return [n for one in value for n in _keyframe_counts(one)]
    return []


def test_recorded_file_is_compact(round_trips: dict[str, dict]) -> None:
    # Never more than one keyframe per sample, and fewer overall: flat stretches and
    # straight ramps take two. (Ramps of whole-number readings sampled on a busy CPU
    # take more, as the times the readings were taken at wander.)
    for source, trip in round_trips.items():
        scenario = trip["scenario"]
        counts = sorted(_keyframe_counts([*scenario["devices"],
                                          *scenario.get("gaudi", {}).get("devices", []),
                                          *scenario.get("tpu", {}).get("chips", []),
                                          *scenario.get("neuron", {}).get("runtimes", [])]))
        print(f"{source}: {len(counts)} signals, keyframes per signal median "
              f"{counts[len(counts) // 2] if counts else 0}, max {max(counts, default=0)}")
        assert max(counts, default=0) <= DURATION_S + 1, source
        assert sum(counts) < 0.75 * len(counts) * DURATION_S, source


def test_xid_and_lost_gpu_at_their_times(round_trips: dict[str, dict]) -> None:
    trip = round_trips["gpu-lost"]
    offset = trip["offset_s"]
    original = load_scenario("gpu-lost")["devices"]
    recorded = trip["scenario"]["devices"]
    for want, got in zip(original, recorded, strict=True):
        assert ("lost_at_s" in got) == ("lost_at_s" in want)
        if "lost_at_s" in want:
            assert abs(got["lost_at_s"] + offset - want["lost_at_s"]) <= EVENT_TOLERANCE_S
        want_xids = want.get("xid_events", [])
        got_xids = got.get("xid_events", [])
        assert [e["xid"] for e in got_xids] == [e["xid"] for e in want_xids]
        for w, g in zip(want_xids, got_xids, strict=True):
            assert abs(g["at_s"] + offset - w["at_s"]) <= EVENT_TOLERANCE_S
    assert any("xid_events" in d for d in recorded)
    # An agent started on the replay sees GPU 2 before its loss, and not after it (a lost
    # GPU cannot even be identified), exactly as one started on the original.
    lost, kept = (json.dumps([recorded[i]["uuid"], "up"]) for i in (2, 0))
    before, after = (trip["replay"][str(t)] for t in (TIMES[0], TIMES[-1]))
    assert before[lost] == 1.0 and after.get(lost, 0.0) == 0.0 and after[kept] == 1.0
    assert trip["original"][f"{TIMES[-1]}+0"].get(lost, 0.0) == 0.0


def test_fabric_degradation_at_its_time(round_trips: dict[str, dict]) -> None:
    trip = round_trips["gb200-nvl72?tray=7"]
    offset = trip["offset_s"]
    for device in trip["scenario"]["devices"]:
        mask = device["fabric"]["health_mask"]
        changes = [t for t, _ in mask["keyframes"][1:]]
        assert len(changes) == 1 and abs(changes[0] + offset - 60) <= EVENT_TOLERANCE_S
        summary = device["fabric"]["health_summary"]["keyframes"]
        assert [v for _, v in summary] == ["HEALTHY", "UNHEALTHY"]
        degraded = json.dumps([device["uuid"], "d", "ray.accelerator.fabric.health.issue",
                               [["field", "degraded_bandwidth"]]])
        assert trip["replay"][str(TIMES[0])][degraded] == 0.0
        assert trip["replay"][str(TIMES[-1])][degraded] == 1.0
