"""The sampling loop: scoped failures, hung devices, backends that come and go.

The backend here is a scripted implementation of the project's own Backend
interface, so the sampler's behaviour is tested without any vendor library.
"""

from __future__ import annotations

import threading
import time

import pytest

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import Backend, BackendUnavailable
from ray_accel.exporter.model import Device, DeviceSample, Reading
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
        self.lost: set[str] = set()

    def open(self):
        if self.failures_before_open > 0:
            self.failures_before_open -= 1
            raise BackendUnavailable("driver not loaded")
        return self.devices

    def sample(self, device: Device) -> DeviceSample:
        self.reads[device.uuid] += 1
        if device.uuid in self.hang:
            self.hang[device.uuid].wait(30)
        if device.uuid in self.lost:
            self.errors.count("gpu_is_lost", "read")
            return DeviceSample(device, up=False, taken_at=time.time())
        return DeviceSample(device, up=True, taken_at=time.time(),
                            readings=(Reading(m.POWER, 100.0 + int(device.index)),))


def _run(sampler: Sampler, cycles: int):
    return [sampler.run_cycle() for _ in range(cycles)][-1]


def _by_uuid(snapshot):
    return {s.device.uuid: s for s in snapshot.devices}


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


def test_hung_device_is_stale_while_others_keep_reporting():
    backend = ScriptedBackend()
    release = threading.Event()
    sampler = Sampler([backend], SnapshotStore(), interval_s=0.1)
    sampler.run_cycle()
    backend.hang["dev-1"] = release
    try:
        snapshot = _run(sampler, 30)
        devices = _by_uuid(snapshot)
        assert devices["dev-0"].up and devices["dev-2"].up
        assert not devices["dev-1"].up and not devices["dev-1"].readings
        assert "stale" in devices["dev-1"].errors["sample"]
        # the hung read was started once and never again while in flight
        assert backend.reads["dev-1"] == 1
        assert backend.reads["dev-0"] == 30
        assert snapshot.error_counts[("agent", "stale", "scripted.sample")] == 1
    finally:
        release.set()
    del backend.hang["dev-1"]
    time.sleep(0.05)
    recovered = _run(sampler, 2)
    assert _by_uuid(recovered)["dev-1"].up


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
    sampler = Sampler([good, bad], SnapshotStore(), interval_s=0.05)
    snapshot = _run(sampler, 3)
    devices = _by_uuid(snapshot)
    assert devices["dev-0"].up
    assert not devices["bad-0"].up
    assert snapshot.error_counts[("agent", "internal", "crashing.sample")] == 2


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
