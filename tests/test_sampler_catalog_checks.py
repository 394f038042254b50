"""A reading the catalog does not describe (a third-party backend's mistake) is dropped and
counted at the sampler, logged once, and every sink still serves the rest."""

from __future__ import annotations

import logging
import time

from prometheus_client.parser import text_string_to_metric_families

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import Backend
from ray_accel.exporter.model import Device, DeviceSample, Link, NodeSnapshot, Reading
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.sinks.otlp import snapshot_metrics
from ray_accel.exporter.sinks.prometheus import PrometheusRenderer, snapshot_text
from ray_accel.exporter.store import SnapshotStore
from ray_accel.exporter.validation import BAD_LABELS, UNKNOWN_METRIC

POWER = Reading(m.POWER, 250.0)
UNKNOWN = Reading("vendor.gpu.magic", 1.0)
UNKNOWN_LABEL = Reading(m.TEMPERATURE, 40.0, (("sensor", "gpu"), ("zone", "a")))
NOT_TEXT = Reading(m.GPU_UTILIZATION, 0.5, (("task", 3),))  # type: ignore[arg-type]
LINK_METRIC_ON_DEVICE = Reading(m.LINK_UP, 1.0)
NOT_A_NUMBER = Reading(m.POWER_LIMIT, "700")  # type: ignore[arg-type]
MISTAKES = (UNKNOWN, UNKNOWN_LABEL, NOT_TEXT, LINK_METRIC_ON_DEVICE, NOT_A_NUMBER)


class CarelessBackend(Backend):
    """A third-party backend that gets some readings wrong."""

    name = "careless"
    vendor = "test"

    def __init__(self) -> None:
        super().__init__()
        self.devices = [Device("test", str(i), f"careless-{i}", "Test GPU") for i in range(2)]

    def open(self):
        return self.devices

    def sample(self, device: Device) -> DeviceSample:
        link = Link("nvlink", 0, readings=(Reading(m.LINK_UP, 1.0), Reading(m.POWER, 9.0)))
        return DeviceSample(device, up=True, taken_at=time.time(),
                            readings=(POWER, *MISTAKES), links=(link,))


def _cycles(count: int) -> NodeSnapshot:
    sampler = Sampler([CarelessBackend()], SnapshotStore(), interval_s=1.0)
    try:
        return [sampler.run_cycle() for _ in range(count)][-1]
    finally:
        sampler.stop()


def test_readings_the_catalog_lacks_are_dropped_counted_and_named(caplog):
    with caplog.at_level(logging.WARNING, logger="ray_accel.exporter.validation"):
        snapshot = _cycles(2)  # each samples both devices (the first right after opening)
    for sample in snapshot.devices:
        assert sample.readings == (POWER,)
        assert sample.links[0].readings == (Reading(m.LINK_UP, 1.0),)
        assert sample.errors[UNKNOWN.metric].startswith(UNKNOWN_METRIC)
        assert sample.errors[m.LINK_UP].startswith(BAD_LABELS)
        assert sample.errors[m.TEMPERATURE] == (
            f"{BAD_LABELS}: label 'zone' is not one of its labels ['sensor']")
    counts = snapshot.error_counts
    assert counts[("careless", UNKNOWN_METRIC, UNKNOWN.metric)] == 4  # 2 devices x 2 cycles
    for mistake in (m.TEMPERATURE, m.GPU_UTILIZATION, m.LINK_UP):
        assert counts[("careless", BAD_LABELS, mistake)] == 4, mistake
    # POWER on the link is the link's mistake, counted with the device's
    assert counts[("careless", BAD_LABELS, m.POWER)] == 4
    assert counts[("careless", "not_finite", m.POWER_LIMIT)] == 4
    logged = [r.getMessage() for r in caplog.records if UNKNOWN.metric in r.getMessage()]
    assert len(logged) == 2  # once per device, not per cycle


def test_every_sink_serves_the_good_readings_and_the_errors():
    snapshot = _cycles(2)
    body, _ = PrometheusRenderer(include_process_metrics=False).render(snapshot, False)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    power = families[m.spec(m.POWER).prometheus_family]
    assert sorted(s.labels["uuid"] for s in power.samples) == ["careless-0", "careless-1"]
    assert all(s.value == 250.0 for s in power.samples)
    assert m.spec(m.TEMPERATURE).prometheus_family not in families
    errors = families[m.spec(m.AGENT_ERRORS).prometheus_family]
    assert {s.labels["kind"] for s in errors.samples} == {UNKNOWN_METRIC, BAD_LABELS, "not_finite"}
    openmetrics, _ = PrometheusRenderer(include_process_metrics=False).render(snapshot, True)
    assert openmetrics.endswith(b"# EOF\n")
    otlp = {metric.name: metric for metric in snapshot_metrics(snapshot, 0)}
    assert [p.value for p in otlp[m.POWER].data.data_points] == [250.0, 250.0]
    assert "vendor.gpu.magic" not in otlp


def test_a_snapshot_built_without_the_sampler_still_renders_past_an_unknown_metric():
    device = Device("test", "0", "careless-0", "Test GPU")
    sample = DeviceSample(device, up=True, taken_at=time.time(), readings=(POWER, UNKNOWN))
    snapshot = NodeSnapshot(cycle=1, taken_at=time.time(), interval_s=1.0, node_labels={},
                            backends=(), devices=(sample,))
    text = snapshot_text(snapshot).decode()
    labels = 'index="0",model="Test GPU",uuid="careless-0",vendor="test"'
    assert f"hw_power_watts{{{labels}}} 250.0" in text
    assert "magic" not in text
