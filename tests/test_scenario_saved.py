"""The saved scenario as every fake reads it: re-read on change, last good copy kept."""

from __future__ import annotations

import json
import os
import time

import pytest

from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.saved import (
    SavedScenario,
    read_once,
    saved_scenario_path,
    scenario_time,
)


def _save(path, epoch: float, name: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"epoch": epoch, "scenario": {"name": name}}))
    os.replace(temporary, path)


def test_a_replaced_file_is_read_again_and_a_vanished_one_keeps_the_last_copy(tmp_path):
    path = tmp_path / "scenario.json"
    _save(path, 100.0, "first")
    saved = SavedScenario(path, recheck_s=0)
    assert saved.scenario()["name"] == "first"
    _save(path, 100.0, "second-and-longer")
    assert saved.scenario()["name"] == "second-and-longer"
    path.unlink()
    assert saved.scenario()["name"] == "second-and-longer"
    path.write_text("{not json")
    assert saved.scenario()["name"] == "second-and-longer"


def test_a_file_never_read_is_an_error(tmp_path):
    with pytest.raises(OSError):
        SavedScenario(tmp_path / "missing.json").document()
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError):
        SavedScenario(tmp_path / "bad.json").document()
    assert read_once(tmp_path / "bad.json") is None
    assert read_once(None) is None


def test_scenario_time_runs_from_the_epoch_unless_frozen():
    now = time.time()
    assert scenario_time({"epoch": now - 30, "scenario": {}}) == pytest.approx(30, abs=1)
    assert scenario_time({"epoch": now - 30, "scenario": {"freeze_at_s": 12.5}}) == 12.5


def test_the_fakes_find_what_simulated_hardware_saved(tmp_path):
    with SimulatedHardware.start("hgx-h200", state_dir=tmp_path) as hardware:
        path = saved_scenario_path(hardware.environ())
        assert path == hardware.scenario_path
        saved = SavedScenario(path)
        assert saved.scenario()["name"] == "hgx-h200"
        assert saved.document()["epoch"] == hardware.epoch
    assert saved_scenario_path({}) is None
