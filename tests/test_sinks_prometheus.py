"""Prometheus exposition of snapshots, checked by promtool and the reference parsers."""

from __future__ import annotations

import shutil
import subprocess

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text
from snapshots import sample_snapshot

from ray_accel.exporter import catalog as m
from ray_accel.exporter.sinks.prometheus import PrometheusRenderer, snapshot_families


def _samples(text: str, parser=parse_text) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in parser(text) for s in family.samples
    }


def test_promtool_accepts_the_exposition(tmp_path):
    body, _ = PrometheusRenderer().render(sample_snapshot(), openmetrics_format=False)
    path = tmp_path / "metrics.prom"
    path.write_bytes(body)
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run `make system-deps`"
    result = subprocess.run([promtool, "check", "metrics"], stdin=path.open("rb"),
                            capture_output=True, text=True)
    # promtool exits 0 with no output when the text is valid and follows best practices
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""


def test_values_labels_and_names_round_trip():
    body, content_type = PrometheusRenderer().render(sample_snapshot(), openmetrics_format=False)
    assert content_type.startswith("text/plain")
    samples = _samples(body.decode())
    device = {"simulated": "true", "vendor": "nvidia", "model": "NVIDIA H200", "index": "0",
              "uuid": "GPU-aaaa"}

    def value(name, **labels):
        return samples[(name, frozenset({**device, **labels}.items()))]

    assert value("hw_gpu_utilization_ratio", task="general") == 0.75
    assert value("hw_power_watts") == 512.5
    assert value("hw_energy_joules_total") == 123456.789
    assert value("hw_errors_total", error_type="ecc_corrected") == 3
    assert value("ray_accelerator_xid_errors_total", xid="79") == 2
    assert value("ray_accelerator_device_up") == 1
    assert value("ray_accelerator_device_sample_age_seconds") == 0.5
    not_ray = {"ray_job_id": "", "ray_worker_id": "", "ray_actor_id": "", "actor_class": "",
               "actor_name": "", "ray_task_id": "", "task_name": ""}
    assert value("ray_accelerator_process_memory_usage_bytes", pid="4242", **not_ray) == 2**30
    info = value("ray_accelerator_device_info", pci_bus_id="00000000:18:00.0", parent_uuid="",
                 architecture="hopper", driver_version="570.1", serial="", numa_node="",
                 cpu_affinity="", nvlink_domain="", nearest_nics="")
    assert info == 1


def test_down_device_has_status_series_but_no_values():
    body, _ = PrometheusRenderer().render(sample_snapshot(), openmetrics_format=False)
    mig_series = {name: v for (name, labels), v in _samples(body.decode()).items()
                  if ("uuid", "MIG-bbbb") in labels}
    assert mig_series["ray_accelerator_device_up"] == 0
    assert mig_series["ray_accelerator_device_sample_age_seconds"] == 10
    assert set(mig_series) == {"ray_accelerator_device_up",
                               "ray_accelerator_device_sample_age_seconds",
                               "ray_accelerator_device_info"}


def test_openmetrics_is_valid_and_carries_units():
    body, content_type = PrometheusRenderer().render(sample_snapshot(), openmetrics_format=True)
    assert content_type.startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert "# UNIT hw_power_watts watts" in text
    assert "# UNIT hw_gpu_utilization_ratio ratio" in text
    samples = _samples(text, parse_om)
    assert any(name == "hw_energy_joules_total" for name, _ in samples)


def test_agent_and_backend_series():
    samples = _samples(PrometheusRenderer(include_process_metrics=False)
                       .render(sample_snapshot(), False)[0].decode())
    node = {"simulated": "true"}
    assert samples[("ray_accelerator_backend_up",
                    frozenset({**node, "backend": "nvidia"}.items()))] == 1
    assert samples[("ray_accelerator_agent_errors_total", frozenset(
        {**node, "backend": "nvidia", "kind": "not_supported",
         "function": "nvmlDeviceGetPowerUsage"}.items()))] == 1
    assert samples[("ray_accelerator_agent_cycles_total", frozenset(node.items()))] == 7
    assert not any(name.startswith("process_") for name, _ in samples)


def test_families_follow_catalog_order_and_render_is_cached():
    names = [f.name for f in snapshot_families(sample_snapshot())]
    order = [s.prometheus_family for s in m.CATALOG]
    assert names == sorted(names, key=order.index)
    renderer = PrometheusRenderer()
    snapshot = sample_snapshot()
    first, _ = renderer.render(snapshot, False)
    assert renderer.render(snapshot, False)[0] is first
    assert renderer.render(sample_snapshot(cycle=8), False)[0] is not first


# Byte-for-byte agreement with prometheus_client: tests/test_sinks_exposition.py.
