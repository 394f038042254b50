"""The metric catalog: names, translation to Prometheus, and the generated document."""

from pathlib import Path

import pytest

from ray_accel.exporter import catalog
from ray_accel.exporter.catalog import CATALOG, Kind, prometheus_name
from ray_accel.exporter.catalog_doc import render_markdown

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("otel", "unit", "kind", "expected"),
    [
        ("hw.gpu.utilization", "1", Kind.GAUGE, "hw_gpu_utilization_ratio"),
        ("hw.gpu.memory.usage", "By", Kind.GAUGE, "hw_gpu_memory_usage_bytes"),
        ("hw.energy", "J", Kind.COUNTER, "hw_energy_joules_total"),
        ("hw.errors", "{error}", Kind.COUNTER, "hw_errors_total"),
        ("hw.temperature", "Cel", Kind.GAUGE, "hw_temperature_celsius"),
        ("ray.accelerator.clock.frequency", "Hz", Kind.GAUGE,
         "ray_accelerator_clock_frequency_hertz"),
        ("ray.accelerator.device.sample.age", "s", Kind.GAUGE,
         "ray_accelerator_device_sample_age_seconds"),
        ("ray.accelerator.device.info", "", Kind.INFO, "ray_accelerator_device_info"),
        ("already.in_bytes", "By", Kind.GAUGE, "already_in_bytes"),
    ],
)
def test_translation_follows_the_otel_prometheus_rules(otel, unit, kind, expected):
    assert prometheus_name(otel, unit, kind) == expected


def test_every_name_is_unique_in_both_vocabularies():
    otel = [s.name for s in CATALOG]
    prom = [s.prometheus_name for s in CATALOG]
    assert len(set(otel)) == len(otel)
    assert len(set(prom)) == len(prom)


def test_names_follow_the_naming_rules():
    for spec in CATALOG:
        assert spec.name.startswith(("hw.", "ray.accelerator.")), spec.name
        if spec.kind is Kind.COUNTER:
            assert spec.prometheus_name.endswith("_total")
        if spec.kind is Kind.INFO:
            assert spec.prometheus_name.endswith("_info")
        if spec.unit == "1":
            assert spec.prometheus_name.endswith("_ratio")
        assert spec.description.endswith("."), spec.name
        assert not set(spec.labels) & set(catalog.SCOPE_LABELS[spec.scope]), spec.name


def test_unknown_metric_lookup_names_the_metric():
    with pytest.raises(KeyError, match=r"hw\.bogus"):
        catalog.spec("hw.bogus")


def test_metrics_document_is_generated_from_the_catalog():
    document = (ROOT / "docs" / "metrics.md").read_text()
    assert document == render_markdown(), "docs/metrics.md is stale: run `make docs`"
    for spec in CATALOG:
        assert f"`{spec.prometheus_name}`" in document
