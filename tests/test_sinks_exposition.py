"""/metrics is written without prometheus_client, byte for byte as prometheus_client writes it.

The reference is prometheus_client itself (imported here, in the test only): its
metric families built from the same series rows, its `generate_latest` for both
formats, its `ProcessCollector` over the same /proc files.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace

import pytest
from prometheus_client import exposition
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString
from snapshots import sample_snapshot

from ray_accel.exporter.catalog import Kind
from ray_accel.exporter.model import NodeSnapshot
from ray_accel.exporter.sinks.exposition import (
    Family,
    go_float,
    openmetrics_exposition,
    text_exposition,
)
from ray_accel.exporter.sinks.process_metrics import ProcessMetrics
from ray_accel.exporter.sinks.prometheus import (
    OPENMETRICS,
    TEXT,
    PrometheusRenderer,
    snapshot_families,
)
from ray_accel.exporter.sinks.series import snapshot_series

_REFERENCE_TYPES = {Kind.GAUGE: GaugeMetricFamily, Kind.COUNTER: CounterMetricFamily}


class _Collected:
    def __init__(self, families) -> None:
        self._families = families

    def collect(self):
        return self._families


def _reference_families(snapshot: NodeSnapshot) -> list:
    """prometheus_client's families of the snapshot's series (what the agent used to build)."""
    series = snapshot_series(snapshot)
    families = []
    for spec, rows in series.in_catalog_order():
        names = series.label_names(spec)
        if spec.kind is Kind.INFO:
            family = InfoMetricFamily(spec.prometheus_family, spec.description, labels=names)
        else:
            family = _REFERENCE_TYPES[spec.kind](spec.prometheus_family, spec.description,
                                                 labels=names, unit=spec.prometheus_unit)
        for label_values, value in rows:
            if spec.kind is Kind.INFO and not isinstance(value, Mapping):
                value = dict(zip(spec.labels, label_values[len(names):], strict=True))
            family.add_metric(label_values[:len(names)], value)
        families.append(family)
    return families


def _tricky_snapshots() -> list[NodeSnapshot]:
    """Quotes, backslashes, newlines and non-ASCII in values; a node label named like a fact."""
    plain = sample_snapshot()
    facts = {"version": 'a"b\\c\nd', "interval_seconds": "1", "scenario": "ünïcode"}
    return [plain,
            replace(plain, agent_facts=facts,
                    node_labels={"ray_node_id": 'n"1', "zone": "z\\1\nx"}),
            replace(plain, node_labels={"architecture": "node's own", "simulated": "true"})]


@pytest.fixture(scope="module")
def h200_snapshot(tmp_path_factory) -> NodeSnapshot:
    """A cycle of the simulated 8x H200 node: links, processes, every NVIDIA series."""
    from ray_accel.exporter.backends.nvidia import NvidiaBackend
    from ray_accel.exporter.sampler import Sampler
    from ray_accel.exporter.simulate import SimulatedHardware
    from ray_accel.exporter.store import SnapshotStore

    with SimulatedHardware.start("hgx-h200", state_dir=tmp_path_factory.mktemp("hw")) as hw:
        hw.activate()
        sampler = Sampler([NvidiaBackend()], SnapshotStore(), interval_s=0.5)
        try:
            return [sampler.run_cycle() for _ in range(2)][-1]
        finally:
            sampler.stop()


def _all_snapshots(h200_snapshot: NodeSnapshot) -> list[NodeSnapshot]:
    return [*_tricky_snapshots(), h200_snapshot]


# (OpenMetrics?, prometheus_client's content type and writer, ours)
_FORMATS = {"text": (False, exposition.CONTENT_TYPE_LATEST, exposition.generate_latest, TEXT),
            "openmetrics": (True, openmetrics.CONTENT_TYPE_LATEST, openmetrics.generate_latest,
                            OPENMETRICS)}


@pytest.mark.parametrize("form", sorted(_FORMATS))
def test_each_format_is_prometheus_clients_byte_for_byte(h200_snapshot, form):
    openmetrics_format, their_type, write, our_type = _FORMATS[form]
    for snapshot in _all_snapshots(h200_snapshot):  # a renderer each: they share a cycle
        renderer = PrometheusRenderer(include_process_metrics=False)
        body, content_type = renderer.render(snapshot, openmetrics_format)
        assert content_type == their_type == our_type
        assert body == write(_Collected(_reference_families(snapshot)))


def test_a_name_filter_keeps_the_families_prometheus_clients_filter_keeps(h200_snapshot):
    names = frozenset({"hw_power_watts", "ray_accelerator_agent_cycles_total",
                       "ray_accelerator_device_info"})
    body, _ = PrometheusRenderer().render(h200_snapshot, False, names)
    kept = [f for f in _reference_families(h200_snapshot)
            if f.name in names or any(s.name in names for s in f.samples)]
    assert len(kept) == 3
    assert body == exposition.generate_latest(_Collected(kept))


def _fake_proc(root, fds: int) -> None:
    (root / "self" / "fd").mkdir(parents=True)
    for number in range(fds):
        (root / "self" / "fd" / str(number)).touch()
    (root / "stat").write_text("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n")
    # After the command's ")": state, then fields 4.. of proc(5); 11/12 utime/stime,
    # 19 start time (ticks), 20 virtual size (bytes), 21 resident pages.
    fields = ["S", *[str(n) for n in range(2, 60)]]
    fields[11], fields[12], fields[19], fields[20], fields[21] = (
        "4321", "1234", "987654", "7340032000", "9000")
    (root / "self" / "stat").write_text("4242 (ray-accel agent) " + " ".join(fields) + "\n")
    (root / "self" / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units\n"
        "Max cpu time              unlimited            unlimited            seconds\n"
        "Max open files            1048576              1048576              files\n")


def test_process_series_are_prometheus_clients_byte_for_byte(tmp_path):
    _fake_proc(tmp_path, fds=7)
    ours = ProcessMetrics(proc=str(tmp_path)).families()
    theirs = list(ProcessCollector(proc=str(tmp_path), registry=None).collect())
    assert [f.name for f in ours] == [f.name for f in theirs]
    assert ours[1].samples[0].value == 9000 * 4096  # resident memory in bytes
    assert exposition.generate_latest(_Collected(ours)) == \
        exposition.generate_latest(_Collected(theirs))
    assert openmetrics_exposition(ours) == openmetrics.generate_latest(_Collected(theirs))


def test_without_proc_there_are_no_process_series(tmp_path):
    assert ProcessMetrics(proc=str(tmp_path / "absent")).families() == []


def test_a_scrape_carries_this_processs_series_after_the_snapshots():
    body = PrometheusRenderer().render(sample_snapshot(), False)[0].decode()
    families = [f.name for f in snapshot_families(sample_snapshot())]
    process_at = body.index("# HELP process_resident_memory_bytes")
    assert all(body.index(f"# HELP {name}") < process_at for name in families
               if f"# HELP {name} " in body)
    assert "process_open_fds" in body and "process_cpu_seconds_total" in body


@pytest.mark.parametrize("value", [0.0, -0.0, 1, 0.5, 1e-9, 123456.0, 1234567.0, 1234567.5,
                                   -1234567.0, 2.0**63, 1e21, 1e300, math.inf, -math.inf,
                                   math.nan, 7340032000, 3.141592653589793])
def test_values_are_written_like_go(value):
    assert go_float(value) == floatToGoString(value)


def test_the_agents_command_line_imports_neither_prometheus_client_nor_an_http_client():
    """What `ray-accel agent` loads before it starts: no prometheus_client, and no urllib
    client (only `topo --address` and Ray attribution's State API use one)."""
    code = ("import sys; import ray_accel.exporter.cli, ray_accel.exporter.agent; "
            "print(sorted(m for m in sys.modules if m.startswith('prometheus_client') "
            "or m in ('urllib.request', 'http.client')))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert found == "[]"


@pytest.mark.parametrize(("kind", "name", "unit"), [
    ("gauge", "x_size", "bytes"), ("gauge", "x_size_bytes", "bytes"),
    ("counter", "x_moved_total", "bytes"), ("counter", "x_moved", ""), ("info", "x", "")])
def test_families_name_and_write_like_prometheus_clients(kind, name, unit):
    """Unit suffixes, `_total`, `_info`; escaping in help texts and label values."""
    documentation = 'Says "hi" \\ and\nmore.'
    labels = [("a", 'q"uote'), ("b", "back\\slash\nnew line")]
    ours = Family(name, documentation, kind, unit, ["z", "a"])
    if kind == "info":
        theirs = InfoMetricFamily(name, documentation, labels=["z", "a"])
    else:
        theirs = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}[kind](
            name, documentation, labels=["z", "a"], unit=unit)
    for number, (label, value) in enumerate(labels):
        measured = {"a": "fact", label: value} if kind == "info" else 1.5 * number
        ours.add_metric([value, "v"], measured)
        theirs.add_metric([value, "v"], measured)
    assert ours.name == theirs.name
    assert text_exposition([ours]) == exposition.generate_latest(_Collected([theirs]))
    assert openmetrics_exposition([ours]) == openmetrics.generate_latest(_Collected([theirs]))
