"""The sampling loop: scoped failures, hung devices, backends that come and go.

The backend here is a scripted implementation of the project's own Backend
interface, so the sampler's behaviour is tested without any vendor library.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import Backend, BackendUnavailable
from ray_accel.exporter.model import Device, DeviceSample, Link, Reading
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.store import SnapshotStore


class ScriptedBackend(Backend):
    name = "scripted"
    vendor = "test"

    def __init__(self, devices: int = 3, opens_after: int = 0) -> None:
        super().__init__()
        self.devices = [Device("test", str(i), f"dev-{i}", "Test GPU") for i in range(devices)]
        self.failures_before_open = opens_after
        self.hang = {}  # uuid -> threading.Event that releases the read
        self.reads = {d.uuid: 0 for d in self.devices}
        self.read_on: dict[str, int] = {}  # uuid -> the thread of its last read
        self.lost: set[str] = set()

    def open(self):
        if self.failures_before_open > 0:
            self.failures_before_open -= 1
            raise BackendUnavailable("driver not loaded")
        return self.devices

    def sample(self, device: Device) -> DeviceSample:
        self.reads[device.uuid] += 1
        self.read_on[device.uuid] = threading.get_ident()
        if device.uuid in self.hang:
            self.hang[device.uuid].wait(30)
        if device.uuid in self.lost:
            self.errors.count("gpu_is_lost", "read")
            return DeviceSample(device, up=False, taken_at=time.time())
        return DeviceSample(device, up=True, taken_at=time.time(),
                            readings=(Reading(m.POWER, 100.0 + int(device.index)),
                                      Reading(m.ENERGY, 1000.0 + self.reads[device.uuid])))


def _run(sampler: Sampler, cycles: int):
    return [sampler.run_cycle() for _ in range(cycles)][-1]


def _by_uuid(snapshot):
    return {s.device.uuid: s for s in snapshot.devices}


def values(sample: DeviceSample) -> dict[str, float]:
    return {r.metric: r.value for r in sample.readings}


def test_first_cycle_opens_and_second_samples_every_device():
    backend = ScriptedBackend()
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.2)
    first = sampler.run_cycle()
    assert first.backends[0].up and first.backends[0].device_count == 3
    second = sampler.run_cycle()
    assert [s.readings[0].value for s in second.devices] == [100.0, 101.0, 102.0]
    assert sampler.store.latest is second


def test_an_open_slower_than_the_interval_is_taken_once_it_finishes():
    backend = ScriptedBackend()
    opened = threading.Event()
    opens = []

    def slow_open():
        opens.append(time.monotonic())
        opened.wait(5)
        return backend.devices

    backend.open = slow_open
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.05)
    assert not sampler.run_cycle().backends[0].up  # still opening
    opened.set()
    time.sleep(0.1)  # the open finishes between two cycles
    snapshot = _run(sampler, 3)
    assert snapshot.backends[0].up and len(snapshot.devices) == 3
    assert len(opens) == 1


def _run_until(sampler: Sampler, done, timeout: float = 10.0):
    """Cycles one interval apart until `done(snapshot)`; the last snapshot."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = sampler.run_cycle()
        if done(snapshot) or time.monotonic() > deadline:
            return snapshot
        time.sleep(sampler.interval_s)


@contextmanager
def _hanging(backend: ScriptedBackend, uuid: str) -> Iterator[None]:
    """`uuid`'s reads hang inside the block; released (and its read let finish) after it."""
    release = threading.Event()
    backend.hang[uuid] = release
    try:
        yield
    finally:
        release.set()
        del backend.hang[uuid]
        time.sleep(0.05)


def test_hung_device_is_stale_while_others_keep_reporting():
    backend = ScriptedBackend()
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.1)
    sampler.run_cycle()  # opens and reads every device once
    with _hanging(backend, "dev-1"):
        snapshot = _run_until(sampler, lambda s: _by_uuid(s)["dev-1"].stale)
        devices = _by_uuid(snapshot)
        assert devices["dev-0"].up and devices["dev-2"].up
        assert not devices["dev-1"].up and devices["dev-1"].stale
        assert "stale" in devices["dev-1"].errors["sample"]
        # its gauges are gone, its counter stays at the last value read
        assert values(devices["dev-1"]) == {m.ENERGY: 1001.0}
        # the hung read was started once and never again while in flight
        assert backend.reads["dev-1"] == 2
        assert backend.reads["dev-0"] == snapshot.cycle
        assert snapshot.error_counts[("agent", "stale", "scripted.sample")] == 1
    recovered = _run(sampler, 2)
    assert _by_uuid(recovered)["dev-1"].up


def test_devices_share_one_read_thread_until_one_is_late():
    backend = ScriptedBackend(devices=4)
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.1)
    _run(sampler, 3)
    assert len(set(backend.read_on.values())) == 1
    shared = backend.read_on["dev-0"]
    with _hanging(backend, "dev-1"):
        snapshot = _run_until(sampler, lambda s: _by_uuid(s)["dev-1"].stale)
        devices = _by_uuid(snapshot)
        assert devices["dev-2"].up and devices["dev-3"].up and not devices["dev-2"].stale
        # dev-1 kept the thread it hung on; the others moved to a new one, together
        assert backend.read_on["dev-1"] == shared
        assert backend.read_on["dev-2"] == backend.read_on["dev-3"] == backend.read_on["dev-0"]
        assert backend.read_on["dev-0"] != shared
        # the reads queued behind the late one missed that one cycle, and only that one
        assert backend.reads["dev-0"] == snapshot.cycle
        assert backend.reads["dev-2"] == backend.reads["dev-3"] == snapshot.cycle - 1
    recovered = _run(sampler, 2)
    assert _by_uuid(recovered)["dev-1"].up
    assert backend.read_on["dev-1"] == shared != backend.read_on["dev-2"]


def test_backend_down_until_driver_appears_then_up():
    backend = ScriptedBackend(opens_after=2)
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.05, retry_s=0.0)
    first = sampler.run_cycle()
    assert not first.backends[0].up
    assert "driver not loaded" in first.backends[0].message
    assert first.devices == ()
    snapshot = _run(sampler, 4)
    assert snapshot.backends[0].up
    assert len(snapshot.devices) == 3


def test_retry_waits_for_its_interval():
    backend = ScriptedBackend(opens_after=1)
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.05, retry_s=60.0)
    _run(sampler, 5)
    assert backend.failures_before_open == 0  # tried once
    assert not sampler.store.latest.backends[0].up


def test_lost_device_is_down_and_counted_while_others_report():
    backend = ScriptedBackend()
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.05)
    sampler.run_cycle()
    backend.lost.add("dev-2")
    snapshot = _run(sampler, 3)
    devices = _by_uuid(snapshot)
    assert devices["dev-0"].up and devices["dev-1"].up
    assert not devices["dev-2"].up
    assert snapshot.error_counts[("scripted", "gpu_is_lost", "read")] == 3


def test_a_crashing_backend_costs_only_its_own_devices():
    class Crashing(ScriptedBackend):
        name = "crashing"

        def sample(self, device):
            raise RuntimeError("bug in a plug-in")

    good, bad = ScriptedBackend(devices=1), Crashing(devices=1)
    bad.devices = [Device("test", "0", "bad-0", "Broken")]
    # a cycle ends once every call answered: the long interval is only the deadline a
    # loaded machine's threads must meet for each cycle to count its call
    sampler = Sampler([good, bad], SnapshotStore(), interval_s=2.0)
    snapshot = _run(sampler, 3)
    devices = _by_uuid(snapshot)
    assert devices["dev-0"].up
    assert not devices["bad-0"].up
    # every cycle read it, the first one too (right after opening)
    assert snapshot.error_counts[("agent", "internal", "crashing.sample")] == 3


def test_background_loop_publishes_cycles_and_stops():
    sampler = Sampler([ScriptedBackend()], SnapshotStore(), interval_s=0.05)
    sampler.start()
    try:
        snapshot = sampler.store.wait_for_cycle(5, timeout=5)
        assert snapshot is not None and snapshot.cycle >= 5
        assert sampler.alive
    finally:
        sampler.stop()
    assert not sampler.alive


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval"):
        Sampler([], SnapshotStore(), interval_s=0)


def test_the_heap_is_trimmed_at_most_once_a_minute():
    from ray_accel.exporter.heap import HeapTrimmer

    now = [0.0]
    trimmer = HeapTrimmer(every_s=60, clock=lambda: now[0])
    for seconds, trims in ((1, 0), (61, 1), (100, 1), (122, 2)):
        now[0] = seconds
        trimmer.maybe_trim()
        assert trimmer.trims == trims, seconds


# -- a device that does not answer keeps its counters (docs/reliability.md) ---------


class EventBackend(ScriptedBackend):
    """Also counts events (like NVIDIA's XIDs) readable while a device does not answer."""

    def __init__(self) -> None:
        super().__init__(devices=2)
        self.events: dict[str, int] = {}

    def event_readings(self, device):
        count = self.events.get(device.uuid)
        return () if count is None else (Reading(m.XID_ERRORS, count, (("xid", "79"),)),)

    def sample(self, device):
        sample = super().sample(device)
        if not sample.up:
            return sample
        link = Link("nvlink", 0, (Reading(m.LINK_IO, 5e9, (("direction", "transmit"),)),
                                  Reading(m.LINK_UP, 1.0)), counters_at=sample.taken_at)
        return replace(sample, readings=(*sample.readings, *self.event_readings(device)),
                       links=(link,))


def test_a_lost_device_keeps_its_counters_and_the_events_of_its_loss_not_its_gauges():
    backend = EventBackend()
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.05)
    backend.events["dev-1"] = 3
    before = _by_uuid(sampler.run_cycle())["dev-1"]
    assert values(before) == {m.POWER: 101.0, m.ENERGY: 1001.0, m.XID_ERRORS: 3}
    # 200 more events arrive in the same cycle as the loss: the last sample never saw them
    backend.events["dev-1"] = 203
    backend.lost.add("dev-1")
    lost = _by_uuid(sampler.run_cycle())["dev-1"]
    assert not lost.up and not lost.stale
    assert values(lost) == {m.ENERGY: 1001.0, m.XID_ERRORS: 203}  # no power: not true any more
    assert lost.taken_at == before.taken_at  # the values' time: the sample's age grows
    (link,) = lost.links
    assert [r.metric for r in link.readings] == [m.LINK_IO] and not link.rates
    time.sleep(0.05)
    later = _by_uuid(sampler.run_cycle())["dev-1"]
    assert values(later) == values(lost) and later.taken_at == before.taken_at
    assert _by_uuid(later_snapshot := sampler.run_cycle())["dev-0"].up
    assert later_snapshot.taken_at - _by_uuid(later_snapshot)["dev-1"].taken_at > 0.05


def test_a_device_back_from_the_loss_reads_afresh():
    backend = EventBackend()
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.05)
    sampler.run_cycle()
    backend.lost.add("dev-0")
    sampler.run_cycle()
    backend.lost.discard("dev-0")
    back = _by_uuid(sampler.run_cycle())["dev-0"]
    assert back.up and values(back)[m.POWER] == 100.0
    assert {r.metric for r in back.links[0].readings} == {m.LINK_IO, m.LINK_UP}
