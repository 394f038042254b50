"""The agent on simulated H200s that start spinning on a hung collective: busy, with their
NVLink and PCIe byte counters flat. The suspected-stall series fires on them, and not on
the GPUs that are as busy but move data."""

from __future__ import annotations

import time

from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.patterns import play_hung_collective

WINDOW_S = 2


def suspected(agent: AgentProcess) -> dict[str, float]:
    _, _, body = agent.get("/metrics")
    return {s.labels["index"]: s.value for f in parse_text(body.decode()) for s in f.samples
            if s.name == "ray_accelerator_collective_suspected_stall"}


def test_hung_collective_is_suspected_and_busy_devices_moving_data_are_not(tmp_path):
    hw = SimulatedHardware.start("hgx-h200", state_dir=tmp_path)
    with AgentProcess("--interval", "0.5", "--collective-stall-window", str(WINDOW_S),
                      env=hw.environ()) as agent:
        agent.wait_for(lambda d: all("collective_suspected_stall" in x for x in d["devices"]))
        time.sleep(WINDOW_S + 1)
        assert set(suspected(agent).values()) == {0}  # GPUs 0-3 train and move data
        play_hung_collective(hw, [0, 1])
        agent.wait_for(lambda d: [x["collective_suspected_stall"] for x in d["devices"]][:2]
                       == [True, True], timeout=WINDOW_S + 10)
        found = suspected(agent)
        assert found["0"] == found["1"] == 1
        # as busy (training), still moving data over NVLink: not suspected
        assert found["2"] == found["3"] == 0
        assert all(found[i] == 0 for i in "4567")
