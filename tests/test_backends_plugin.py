"""A third-party backend, installed as its own distribution, seen through a real agent.

The example distribution (tests/example_backend) is registered the way pip
would: its package and a ``.dist-info`` with its entry points on a folder that
is put on the path, here and in the agent's PYTHONPATH. Nothing is installed
into the environment, so other tests do not see the example backend.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import shutil
import sys
import tomllib

import pytest
from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter.backends import ENTRY_POINT_GROUP, available_backends, load_backends
from ray_accel.exporter.backends.base import BackendUnavailable

EXAMPLE = pathlib.Path(__file__).resolve().parent / "example_backend"


def install(site: pathlib.Path, name: str, version: str, entry_points: dict[str, str],
            package: pathlib.Path | None = None) -> None:
    """What pip leaves in site-packages: the package and its dist-info with entry points."""
    if package is not None:
        shutil.copytree(package, site / package.name)
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path) -> pathlib.Path:
    """A folder with the example distribution installed, as declared in its pyproject.toml."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    folder = tmp_path / "site"
    install(folder, project["name"], project["version"],
            project["entry-points"][ENTRY_POINT_GROUP], EXAMPLE / "ray_accel_example_backend")
    return folder


@pytest.fixture
def on_path(site, monkeypatch) -> pathlib.Path:
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    for name in [n for n in sys.modules if n.startswith("ray_accel_example_backend")]:
        del sys.modules[name]


def test_the_example_is_found_and_reads_its_devices(on_path):
    assert "example" in available_backends()
    (backend,) = load_backends(["example"])
    devices = backend.open()
    assert [(d.vendor, d.index, d.uuid) for d in devices] == [
        ("example", "0", "EXA-0000"), ("example", "1", "EXA-0001")]
    first = backend.sample(devices[0])
    assert first.up and {r.metric for r in first.readings} == {
        "hw.gpu.utilization", "hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.power"}
    for _ in range(3):
        second = backend.sample(devices[1])
    # no power sensor: absent, reported, and asked only once
    assert "hw.power" not in {r.metric for r in second.readings}
    assert second.errors == {"power_mw": "not_supported"}
    assert backend.errors.snapshot() == {("not_supported", "power_mw"): 1}


def test_example_without_its_driver_is_unavailable(on_path, monkeypatch):
    monkeypatch.setenv("EXAMPLE_DEVICES", "0")
    (backend,) = load_backends(["example"])
    with pytest.raises(BackendUnavailable, match="DRIVER_NOT_LOADED"):
        backend.open()


def series(body: bytes, name: str) -> list:
    return [s for family in parse_text(body.decode()) for s in family.samples if s.name == name]


def test_a_real_agent_exports_the_plugin_next_to_the_built_in_backends(site):
    broken = site.parent / "broken"
    install(broken, "ray-accel-broken-backend", "0.1.0", {"broken": "no_such_module:Backend"})
    python_path = os.pathsep.join([str(site), str(broken), os.environ.get("PYTHONPATH", "")])
    env = {"PYTHONPATH": python_path, "EXAMPLE_LOST": "1", "EXAMPLE_UNCATALOGUED": "1"}
    args = ("--simulate", "l4-pcie", "--interval", "0.2",
            "--backend", "example", "--backend", "nvidia", "--backend", "broken")
    with AgentProcess(*args, env=env) as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 6)
        _, _, body = agent.get("/metrics")
        up = {s.labels["backend"]: s.value for s in series(body, "ray_accelerator_backend_up")}
        assert up == {"example": 1.0, "nvidia": 1.0, "broken": 0.0}
        utilization = {(s.labels["vendor"], s.labels["model"], s.labels["index"])
                       for s in series(body, "hw_gpu_utilization_ratio")
                       if s.labels["vendor"] == "example"}
        assert utilization == {("example", "Example Accelerator X1", "0")}
        device_up = {(s.labels["vendor"], s.labels["index"]): s.value
                     for s in series(body, "ray_accelerator_device_up")}
        assert device_up[("example", "0")] == 1.0 and device_up[("example", "1")] == 0.0
        assert len(series(body, "hw_power_watts")) == 4 + 1  # four L4s and example 0
        # the plug-in's reading of a metric the catalog lacks is dropped and counted, not served
        assert b"example_fan" not in body
        assert {(s.labels["backend"], s.labels["kind"], s.labels["function"])
                for s in series(body, "ray_accelerator_agent_errors_total")
                if s.labels["kind"] == "unknown_metric"} == {
            ("example", "unknown_metric", "example.fan.speed")}
        health = agent.json("/healthz")
        # sampling runs, but a lost device and a plug-in that cannot load do not answer
        assert health["status"] == "degraded"
        assert "could not be loaded" in health["backends"]["broken"]["message"]
        assert {(p.get("backend"), p.get("uuid")) for p in health["not_answering"]} == {
            ("broken", None), (None, "example-index-1")}
        snapshot = agent.json("/api/v1/snapshot")
        example = [d for d in snapshot["devices"] if d["vendor"] == "example"]
        assert example[1]["uuid"] == "example-index-1" and not example[1]["up"]
        assert example[1]["errors"] == {"busy_percent": "device_lost"}
