"""Processes with a time window (`from_s`, `until_s`): listed only inside it, by both fakes.

The recorder writes a process that came and went during a recording this way;
the fake NVML library and the fake amdsmi list it for from_s <= t < until_s.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import pynvml
import pytest
from amd_support import amd_scenario, amdsmi_modules, simulation

from ray_accel.exporter.simulate import ScenarioError, load_scenario

WINDOW = {"pid": 4242, "used_memory_bytes": 2**30, "from_s": 5, "until_s": 10}
TIMES = (1.0, 5.0, 9.9, 10.0, 30.0)
LISTED = [False, True, True, False, False]
# A clock that reads 10 x t MHz: once a fake answers it for t, it plays the scenario at t
# (the fakes re-read a changed scenario at most every 10 ms).
CLOCK = {"keyframes": [[0, 0], [100, 1000]]}


def _wait_for(read: Callable[[], float], value: float, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while round(read()) != round(value):
        assert time.monotonic() < deadline, f"the fake never played t = {value / 10}"
        time.sleep(0.005)


def _at(scenario: dict, t: float) -> dict:
    frozen = copy.deepcopy(scenario)
    frozen["freeze_at_s"] = t
    return frozen


def test_nvml_lists_a_windowed_process_only_inside_its_window(nvml) -> None:
    scenario = load_scenario("l4-pcie")
    scenario["devices"][0]["processes"].append(dict(WINDOW))
    scenario["devices"][0]["clock_sm_mhz"] = CLOCK
    scenario["devices"][1]["processes"].append({**WINDOW, "until_s": None})  # from 5 s on
    hw = nvml(_at(scenario, 0.0))
    first, second = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    seen, seen_after = [], []
    for t in TIMES:
        hw.update(_at(scenario, t))
        _wait_for(lambda: pynvml.nvmlDeviceGetClockInfo(first, pynvml.NVML_CLOCK_SM), 10 * t)
        seen.append(4242 in {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(first)})
        seen_after.append(4242 in {p.pid for p in
                                   pynvml.nvmlDeviceGetComputeRunningProcesses(second)})
    assert seen == LISTED
    assert seen_after == [False, True, True, True, True]


def test_amdsmi_lists_a_windowed_process_only_inside_its_window(tmp_path) -> None:
    scenario = amd_scenario(devices=1)
    scenario["devices"][0]["processes"] = [dict(WINDOW)]
    scenario["devices"][0]["clock_gfx_mhz"] = CLOCK
    with simulation(tmp_path) as start, amdsmi_modules(start) as run:
        module, hw = run(_at(scenario, 0.0))
        handle = module.amdsmi_get_processor_handles()[0]
        seen = []
        gfx = module.AmdSmiClkType.GFX
        for t in TIMES:
            hw.update(_at(scenario, t))
            _wait_for(lambda: module.amdsmi_get_clock_info(handle, gfx)["clk"], 10 * t)
            seen.append([p["pid"] for p in module.amdsmi_get_gpu_process_list(handle)] == [4242])
    assert seen == LISTED


@pytest.mark.parametrize("source", ("l4-pcie", "mi300x-8"))
def test_a_window_that_ends_before_it_starts_is_refused(source: str) -> None:
    scenario = load_scenario(source)
    scenario["devices"][0].setdefault("processes", []).append({**WINDOW, "until_s": 5})
    with pytest.raises(ScenarioError, match=r"devices\[0\]\.processes\[\d+\]\.until_s"):
        load_scenario(scenario)
    scenario["devices"][0]["processes"][-1] = {**WINDOW, "from_s": -1}
    with pytest.raises(ScenarioError, match=r"from_s"):
        load_scenario(scenario)
