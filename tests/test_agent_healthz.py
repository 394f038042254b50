"""What /healthz says (docs/api.md): ok, degraded with what does not answer, stalled, starting.

And which backends count as absent from a host (not a fault) rather than down.
"""

from __future__ import annotations

import pytest

from ray_accel.exporter.backends.base import BackendAbsent, BackendUnavailable, unavailable
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.backends.nvidia import backend as nvidia_backend
from ray_accel.exporter.health import health
from ray_accel.exporter.model import BackendStatus, Device, DeviceSample, NodeSnapshot
from ray_accel.exporter.simulate import STATE_ENV

NOW = 1000.0
GPU = Device("nvidia", "0", "GPU-0", "H200")


def _snapshot(backends=(), devices=(), taken_at=NOW) -> NodeSnapshot:
    return NodeSnapshot(cycle=7, taken_at=taken_at, interval_s=1.0, node_labels={},
                        backends=tuple(backends), devices=tuple(devices))


NVIDIA_UP = BackendStatus("nvidia", "nvidia", up=True, device_count=1)
AMD_ABSENT = BackendStatus("amd", "amd", up=False, message="amdsmi is not installed",
                           absent=True)


def test_everything_answering_is_ok_and_absent_backends_do_not_count():
    body, code = health(_snapshot([NVIDIA_UP, AMD_ABSENT], [DeviceSample(GPU, True, NOW)]),
                        sampler_alive=True, now=NOW + 0.5)
    assert (code, body["status"], body["not_answering"]) == (200, "ok", [])
    assert body["backends"]["amd"] == {"up": False, "absent": True, "devices": 0,
                                       "message": "amdsmi is not installed"}


def test_a_backend_that_should_have_devices_and_does_not_answer_degrades():
    down = BackendStatus("nvidia", "nvidia", up=False, message="NVML could not be initialised")
    body, code = health(_snapshot([down, AMD_ABSENT]), sampler_alive=True, now=NOW)
    assert (code, body["status"]) == (200, "degraded")
    assert body["not_answering"] == [
        {"backend": "nvidia", "state": "down", "reason": "NVML could not be initialised"}]


@pytest.mark.parametrize(("sample", "state", "reason"), [
    (DeviceSample(GPU, False, NOW, errors={"nvmlDeviceGetName": "gpu_is_lost"}), "down",
     "nvmlDeviceGetName: gpu_is_lost"),
    (DeviceSample(GPU, False, NOW, errors={"sample": "stale: no answer"}, stale=True), "stale",
     "sample: stale: no answer"),
])
def test_a_device_down_or_stale_degrades_and_is_named(sample, state, reason):
    body, code = health(_snapshot([NVIDIA_UP], [sample]), sampler_alive=True, now=NOW)
    assert (code, body["status"]) == (200, "degraded")
    assert body["not_answering"] == [
        {"vendor": "nvidia", "index": "0", "uuid": "GPU-0", "state": state, "reason": reason}]


def test_a_dead_or_late_loop_is_stalled_and_no_cycle_is_starting():
    snapshot = _snapshot([NVIDIA_UP], [DeviceSample(GPU, True, NOW)])
    assert health(snapshot, sampler_alive=False, now=NOW)[0]["status"] == "stalled"
    body, code = health(snapshot, sampler_alive=True, now=NOW + 60)
    assert (code, body["status"]) == (503, "stalled")
    body, code = health(None, sampler_alive=True, now=NOW)
    assert (code, body["status"], body["backends"]) == (503, "starting", {})


def test_a_backend_is_absent_only_where_its_device_files_are_missing_too(tmp_path):
    missing = str(tmp_path / "nvidia[0-9]*")
    assert type(unavailable("no driver", [missing])) is BackendAbsent
    (tmp_path / "nvidia0").touch()
    found = unavailable("no driver", [missing])
    assert type(found) is BackendUnavailable and str(found) == "no driver"


def test_nvml_without_its_driver_is_absent_unless_the_host_has_gpu_device_files(
        monkeypatch, tmp_path):
    monkeypatch.delenv(STATE_ENV, raising=False)  # the fake NVML then answers DRIVER_NOT_LOADED
    monkeypatch.setattr(nvidia_backend, "_DEVICE_NODES", (str(tmp_path / "nvidia[0-9]*"),))
    with pytest.raises(BackendAbsent, match="NVML could not be initialised"):
        NvidiaBackend().open_library()
    (tmp_path / "nvidia0").touch()  # a GPU whose driver is not loaded: a fault
    with pytest.raises(BackendUnavailable) as raised:
        NvidiaBackend().open_library()
    assert not isinstance(raised.value, BackendAbsent)


def test_devices_without_gpm_are_named_once_without_degrading(tmp_path):
    """An Ada L4 has no GPM: /healthz says so once, the node stays ok."""
    from ray_accel.exporter.sampler import Sampler
    from ray_accel.exporter.simulate import SimulatedHardware
    from ray_accel.exporter.store import SnapshotStore

    with SimulatedHardware.start("l4-pcie", state_dir=tmp_path) as hardware:
        hardware.activate()
        sampler = Sampler([NvidiaBackend()], SnapshotStore(), interval_s=0.5)
        try:
            snapshot = [sampler.run_cycle() for _ in range(2)][-1]
        finally:
            sampler.stop()
    body, code = health(snapshot, sampler_alive=True, now=snapshot.taken_at)
    assert (code, body["status"]) == (200, "ok")
    assert sorted(body["unsupported"]["gpm"]) == sorted(s.device.uuid for s in snapshot.devices)
    assert len(snapshot.devices) == 4


def test_a_library_that_opens_at_a_cycles_end_lists_its_devices_as_not_read_yet(tmp_path):
    """NVML opened after the cycle stopped waiting for it, before the cycle ended: its GPUs
    are listed but none was read, so /healthz must not say every device answers."""
    import time

    from ray_accel.exporter.backends.base import ErrorTally
    from ray_accel.exporter.runner import BackendRunner
    from ray_accel.exporter.simulate import SimulatedHardware

    with SimulatedHardware.start("hgx-h200", state_dir=tmp_path) as hardware:
        hardware.activate()
        runner = BackendRunner(NvidiaBackend(), retry_s=5.0)
        try:
            (opening,) = runner.start_cycle(time.time())
            opening.result(timeout=60)  # done after the cycle's wait, before its end
            runner.finish_cycle(time.time(), 2.0, ErrorTally())
            listed = _snapshot([runner.status()], runner.samples(), taken_at=time.time())
            body, code = health(listed, sampler_alive=True, now=listed.taken_at)
            assert (code, body["status"], body["backends"]["nvidia"]["devices"]) == (
                200, "degraded", 8)
            assert [p["state"] for p in body["not_answering"]] == ["stale"] * 8
            # the next cycle reads them
            futures = runner.start_cycle(time.time())
            for future in futures:
                future.result(timeout=60)
            runner.finish_cycle(time.time(), 2.0, ErrorTally())
            read = _snapshot([runner.status()], runner.samples(), taken_at=time.time())
            assert health(read, sampler_alive=True, now=read.taken_at)[0]["status"] == "ok"
        finally:
            runner.shutdown()
            runner.backend.close()
