"""`ray-accel record` from the command line: privacy, bad input, nothing to record, no overwrite."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from ray_accel.exporter.model import BackendStatus, Device
from ray_accel.exporter.record.history import Recording
from ray_accel.exporter.record.scenario_file import (
    NothingRecorded,
    build_scenario,
    device_count,
    skipped_families,
)
from ray_accel.exporter.simulate import load_scenario

CLI = [sys.executable, "-m", "ray_accel.exporter.cli"]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("record") / "l4.json"
    done = _run("record", "--simulate", "l4-pcie", "--duration", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ray-accel agent --simulate" in done.stdout
    assert "recorded 4 device(s)" in done.stdout
    return out


def test_identities_are_replaced_consistently(recorded: pathlib.Path) -> None:
    original = load_scenario("l4-pcie")["devices"]
    devices = json.loads(recorded.read_text())["devices"]
    assert [d["pci_bus_id"] for d in devices] == [d["pci_bus_id"] for d in original]
    assert not {d["uuid"] for d in devices} & {d["uuid"] for d in original}
    assert not {d.get("serial") for d in devices} & {d.get("serial") for d in original}
    original_pids = {p["pid"] for d in original for p in d.get("processes", [])}
    pids = [p["pid"] for d in devices for p in d.get("processes", [])]
    assert pids and not set(pids) & original_pids
    assert len(set(pids)) == len(original_pids)  # one placeholder per process


def test_tampered_file_is_refused_naming_the_key(recorded: pathlib.Path,
                                                 tmp_path: pathlib.Path) -> None:
    document = json.loads(recorded.read_text())
    document["devices"][1]["power_mw"] = "hot"
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    done = _run("agent", "--simulate", str(tampered), "--port", "0", "--no-ray")
    assert done.returncode == 2
    assert "devices[1].power_mw" in done.stderr


def test_truncated_file_is_refused_naming_where(recorded: pathlib.Path,
                                                tmp_path: pathlib.Path) -> None:
    truncated = tmp_path / "truncated.json"
    text = recorded.read_text()
    truncated.write_text(text[: len(text) // 2])
    done = _run("agent", "--simulate", str(truncated), "--port", "0", "--no-ray")
    assert done.returncode == 2
    assert "invalid JSON" in done.stderr and "line" in done.stderr


def test_no_devices_says_so_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"devices": []}))
    out = tmp_path / "out.json"
    done = _run("record", "--simulate", str(empty), "--duration", "1", "--out", str(out))
    assert done.returncode == 1
    assert "no backend found a device" in done.stderr and "nothing written" in done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [empty]


def test_devices_no_recorder_reads_are_refused_naming_them() -> None:
    # A third-party backend's devices (here a made-up "acme" plug-in): named, not skipped.
    widget = Device("acme", "0", "acme-0", "Widget 9000")
    recording = Recording(devices={widget.uuid: widget},
                          backends=(BackendStatus("acme-widgets", "acme", True, 1),))
    with pytest.raises(NothingRecorded, match=r"only acme-widgets \(1 device\) found: "
                                              r"recording reads the NVIDIA, AMD"):
        build_scenario(recording)
    assert skipped_families(recording) == {"acme-widgets": 1}


def test_amd_node_is_recorded_with_its_partitions(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "mi355x.json"
    done = _run("record", "--simulate", "mi355x-8", "--duration", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    devices = json.loads(out.read_text())["devices"]
    original = load_scenario("mi355x-8")["devices"]
    assert [d["vendor"] for d in devices] == ["amd"] * 8
    replayed = load_scenario(str(out))["devices"]  # bus ids in the loader's one form
    assert [d["pci_bus_id"] for d in replayed] == [d["pci_bus_id"] for d in original]
    assert len(devices[4]["partitions"]) == len(original[4]["partitions"])
    assert devices[4]["compute_partition"] == "CPX" and devices[4]["num_xcc"] == 8
    # identities replaced: AMD UUIDs (no prefix) and those of the partitions too
    recorded = {d["uuid"] for d in devices} | {p["uuid"] for p in devices[4]["partitions"]}
    known = {d["uuid"] for d in original} | {p["uuid"] for p in original[4]["partitions"]}
    assert len(recorded) == 15 and not recorded & known


@pytest.mark.parametrize("scenario, section, devices", [("tpu-v5e-8", "tpu", 8),
                                                      ("trn1-32xl", "neuron", 16)])
def test_a_family_recorded_in_its_section_is_counted(tmp_path: pathlib.Path, scenario: str,
                                                     section: str, devices: int) -> None:
    out = tmp_path / f"{scenario}.json"
    done = _run("record", "--simulate", scenario, "--duration", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["devices"] == [] and section in document
    assert f"recorded {devices} device(s) to {out}" in done.stdout
    assert device_count(document) == devices


def test_existing_file_is_not_overwritten(recorded: pathlib.Path) -> None:
    before = recorded.read_bytes()
    done = _run("record", "--simulate", "l4-pcie", "--duration", "1", "--out", str(recorded))
    assert done.returncode == 2 and "not overwritten" in done.stderr
    assert recorded.read_bytes() == before


def test_bad_arguments_are_refused(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out.json"
    for args, message in ((("--duration", "0"), "--duration must be between 0.01 and 86400"),
                          (("--duration", "inf"), "--duration must be between"),
                          (("--interval", "nan"), "--interval must be between"),
                          (("--from-agent", "http://127.0.0.1:1", "--last", "ten"),
                           "is not a duration"),
                          (("--simulate", "no-such-scenario"), "no-such-scenario"),
                          (("--simulate", ""), "--simulate: expected a shipped scenario")):
        done = _run("record", *args, "--out", str(out))
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
        assert not out.exists()


def test_a_stopped_recording_says_so_cleans_up_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    """SIGTERM (and Ctrl-C) end `record` with one line and status 130; the simulated
    hardware's folder is removed and no file is written."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    out = tmp_path / "out.json"
    running = subprocess.Popen(
        [sys.executable, "-m", "ray_accel.exporter.cli", "record", "--simulate", "l4-pcie",
         "--duration", "60", "--out", str(out)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(temporary)})
    while not list(temporary.iterdir()):  # the simulated hardware is up
        time.sleep(0.1)
    time.sleep(1.0)
    running.send_signal(signal.SIGTERM)
    _, errors = running.communicate(timeout=60)
    assert running.returncode == 130
    assert "interrupted" in errors and "Traceback" not in errors, errors
    assert not out.exists() and list(temporary.iterdir()) == []
