"""The agent's packed history gives back exactly the frames it was fed, within its bounds."""

from __future__ import annotations

import itertools
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import replace

from ray_accel.exporter.model import (
    Device,
    DeviceSample,
    Link,
    NodeSnapshot,
    ProcessSample,
    Reading,
)
from ray_accel.exporter.record.frames import Frame, FrameMaker, series_of
from ray_accel.exporter.record.history import History

GPUS = [Device("nvidia", str(i), f"GPU-{i:08d}-0000-0000-0000-000000000000", "Test GPU")
        for i in range(3)]


def _sample(device: Device, cycle: int, taken_at: float, rng: random.Random) -> DeviceSample:
    """Some values change every cycle, some never, a counter grows; processes come and go."""
    readings = (Reading("hw.gpu.utilization", rng.random()),
                Reading("hw.power", 300.0 + rng.gauss(0, 20)),
                Reading("hw.energy", 1e9 + 1234.56789 * cycle),  # far from float32's reach
                Reading("hw.gpu.memory.limit", 141e9),
                Reading("hw.temperature", math.nan if cycle % 7 == 3 else 40.0 + cycle % 5))
    processes = tuple(ProcessSample(1000 + pid, (Reading("hw.gpu.memory.usage", 2.0**30),))
                      for pid in range(cycle // 4 % 3))
    errors = {"nvmlDeviceGetPowerUsage": "NotSupported"} if cycle % 5 == 0 else {}
    return DeviceSample(device, up=cycle % 9 != 8, taken_at=taken_at, readings=readings,
                        processes=processes, errors=errors, stale=cycle % 11 == 10)


def _snapshot(cycle: int, rng: random.Random) -> NodeSnapshot:
    taken_at = 1000.0 + cycle
    devices = [d for i, d in enumerate(GPUS) if not (i == 2 and 12 <= cycle < 15)]  # one leaves
    return NodeSnapshot(cycle=cycle, taken_at=taken_at, interval_s=1.0, node_labels={},
                        backends=(), devices=tuple(_sample(d, cycle, taken_at, rng)
                                                   for d in devices))


def _plain(frame: Frame) -> list:
    """A frame as comparable values (NaN compared by its bits, as it was stored)."""
    return [frame.taken_at, [(d.uuid, d.taken_at, d.up, d.stale, d.keys,
                              d.values.tobytes(), dict(d.errors), d.counters_at)
                             for d in frame.devices]]


def _fed(history: History, cycles: int, seed: int) -> Iterator[tuple[int, list]]:
    """Feeds `history` one snapshot per cycle; yields the cycle and every frame fed so far."""
    rng, maker, fed = random.Random(seed), FrameMaker(), []
    for cycle in range(cycles):
        snapshot = _snapshot(cycle, rng)
        fed.append(_plain(maker.frame(snapshot)))
        history.add(snapshot)
        yield cycle, fed


def _kept(history: History, last_s: float | None = None) -> list:
    return [_plain(f) for f in history.recording(last_s).frames]


def test_frames_come_back_exactly_across_drops_key_changes_and_devices_leaving() -> None:
    history = History(max_age_s=10)
    for cycle, fed in _fed(history, 40, seed=21):
        kept = _kept(history)
        assert kept == fed[-len(kept):], cycle
        assert len(kept) == min(cycle + 1, 11)
    assert _kept(history, last_s=3) == fed[-4:]


def test_packed_history_stays_within_its_byte_cap_and_keeps_the_newest() -> None:
    history = History(max_bytes=6_000)
    for cycle, fed in _fed(history, 60, seed=7):
        assert history.nbytes <= 6_000, (cycle, len(fed))
    kept = _kept(history)
    assert 1 < len(kept) < 60
    assert kept == fed[-len(kept):]


def test_unchanged_values_pack_smaller_than_changing_ones() -> None:
    """Packing against the frame before is what makes the history small."""
    device = GPUS[0]
    steady, changing = History(), History()
    rng = random.Random(3)
    for cycle in range(30):
        taken_at = 1000.0 + cycle
        same = tuple(Reading("hw.power", 100.0 + i) for i in range(200))
        moving = tuple(Reading("hw.power", rng.random()) for i in range(200))
        for history, readings in ((steady, same), (changing, moving)):
            history.add(NodeSnapshot(cycle, taken_at, 1.0, {}, (), (
                DeviceSample(device, True, taken_at, readings=readings),)))
    assert steady.nbytes * 2 < changing.nbytes  # with the same key set counted in both


def test_a_new_key_set_reuses_the_keys_it_shares_and_counts_in_the_bytes() -> None:
    """A process coming and going every cycle costs a new key set, not a copy of every key."""
    device = GPUS[0]
    own = tuple(Reading("hw.power", 100.0, (("n", str(i)),)) for i in range(300))
    history = History()
    sizes = []
    for cycle in range(20):
        taken_at = 1000.0 + cycle
        process = ProcessSample(2000 + cycle, (Reading("hw.gpu.memory.usage", 2.0**30),))
        history.add(NodeSnapshot(cycle, taken_at, 1.0, {}, (), (DeviceSample(
            device, True, taken_at, readings=own, processes=(process,)),)))
        sizes.append(history.nbytes)
    frames = history.recording().frames
    first, last = frames[0].devices[0], frames[-1].devices[0]
    assert first.keys != last.keys
    assert all(a is b for a, b in zip(first.keys[:300], last.keys[:300], strict=True))
    grown = [after - before for before, after in itertools.pairwise(sizes)]
    one_copy = sum(sys.getsizeof(key) for key in first.keys)
    assert all(300 * 8 < step < one_copy for step in grown), (grown, one_copy)


def _shaped_sample(device: Device, variant: int) -> DeviceSample:
    """One of several samples whose series differ only slightly: a label value, a link's
    index or type, a reading moved from one link to the next, a process's pid."""
    io = (Reading("hw.gpu.io", 1.0, (("direction", "transmit"),)),
          Reading("hw.gpu.io", 2.0, (("direction", "receive" if variant != 1 else "x"),)))
    links = (Link("nvlink", 0, io[:1] if variant == 2 else io),
             Link("nvlink" if variant != 3 else "pcie", 1 if variant != 4 else 2,
                  io[1:] + io[:1] if variant == 2 else io))
    pid = 100 if variant != 5 else 101
    processes = (ProcessSample(pid, (Reading("hw.gpu.memory.usage", 2.0**30),)),)
    readings = (Reading("hw.power", 300.0 + variant), Reading("hw.temperature", 40.0))
    return DeviceSample(device, True, 1000.0 + variant, readings=readings, links=links,
                        processes=() if variant == 6 else processes)


def test_frame_keys_are_always_the_series_keys_of_their_sample() -> None:
    """FrameMaker reuses a device's keys only while its series are the same ones."""
    maker, device = FrameMaker(), GPUS[0]
    variants = [0, 0, 1, 0, 2, 3, 4, 0, 5, 6, 6, 0]
    for cycle, variant in enumerate(variants):
        sample = _shaped_sample(device, variant)
        frame = maker.frame(NodeSnapshot(cycle, sample.taken_at, 1.0, {}, (), (sample,)))
        pairs = list(series_of(sample))
        assert frame.devices[0].keys == tuple(key for key, _ in pairs), (cycle, variant)
        assert list(frame.devices[0].values) == [value for _, value in pairs]


def test_links_and_processes_handed_back_unchanged_keep_their_keys_and_values() -> None:
    """A backend hands back the very links and processes tuples it did not read again; the
    device's own readings still change around them, in values and in series."""
    maker, device = FrameMaker(), GPUS[0]
    base = _shaped_sample(device, 0)
    owns = [(Reading("hw.power", 300.0), Reading("hw.temperature", 40.0)),
            (Reading("hw.power", 301.0), Reading("hw.temperature", 41.0)),
            (Reading("hw.power", 302.0),),
            (Reading("hw.temperature", 42.0), Reading("hw.power", 303.0))]
    for cycle, own in enumerate(owns):
        sample = replace(base, readings=own)  # the same links and processes tuples
        frame = maker.frame(NodeSnapshot(cycle, sample.taken_at, 1.0, {}, (), (sample,)))
        pairs = list(series_of(sample))
        assert frame.devices[0].keys == tuple(key for key, _ in pairs), cycle
        assert list(frame.devices[0].values) == [value for _, value in pairs], cycle
