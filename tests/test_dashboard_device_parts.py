"""The cluster's memory and power sums count a device once, not again through its parts
(MIG instances, NeuronCores, AMD compute partitions), read from real agents' summaries."""

from __future__ import annotations

import json

import pytest
from agent_process import AgentProcess, write_scenario

from ray_accel.dashboard_module.aggregate import NodeState, build_view
from ray_accel.dashboard_module.fleet import node_id
from ray_accel.exporter.node_view import reduce_summary
from ray_accel.exporter.simulate import load_scenario


@pytest.mark.parametrize("scenario", ["a100-mig", "trn1-32xl", "mi355x-8"])
def test_a_devices_parts_are_not_added_to_its_memory_again(scenario):
    with AgentProcess("--simulate", scenario, "--no-ray") as agent:
        agent.wait_for(lambda d: d["devices"] and all(x["up"] for x in d["devices"]))
        _, _, body = agent.get("/api/v1/summary")
    node = reduce_summary(json.loads(body))
    devices = node["devices"]
    whole = [d for d in devices if "/" not in d["index"]]
    assert len(whole) < len(devices)  # the scenario has parts of devices
    view = build_view([NodeState(node_id(1), "u", "h", data=node)], 5, now=node["taken_at"])
    memory = view.summary["memory"]
    assert memory["used_bytes"] == sum(d["memory_used_bytes"] or 0 for d in whole)
    assert memory["total_bytes"] == sum(d["memory_total_bytes"] or 0 for d in whole)
    assert view.summary["power"]["watts"] == sum(d["power_watts"] or 0 for d in whole)
    assert view.summary["devices"]["total"] == len(devices)  # each part is still listed


@pytest.mark.parametrize("scenario, sensor", [("mixed", "edge"), ("mi300x-8", "hotspot"),
                                              ("hgx-h200", "gpu")])
def test_every_vendors_device_shows_a_temperature(tmp_path, scenario, sensor):
    """The views' temperature is the die's ("gpu"), else an AMD GPU's edge, else its hotspot:
    an AMD GPU's had been left out, so a hot one never counted as hot."""
    frozen = write_scenario(tmp_path, {**load_scenario(scenario), "freeze_at_s": 30.0})
    with AgentProcess("--simulate", frozen, "--no-ray") as agent:
        snapshot = agent.wait_for(lambda d: d["devices"]
                                  and all(x["up"] for x in d["devices"]))
        _, _, body = agent.get("/api/v1/summary")
    node = reduce_summary(json.loads(body))
    for device, raw in zip(node["devices"], snapshot["devices"], strict=True):
        readings = {r["labels"]["sensor"]: r["value"]
                    for r in raw["values"].get("hw.temperature", [])}
        if device["vendor"] == "amd" and "gpu" not in readings:
            want = readings.get("edge", readings.get("hotspot"))
        else:
            want = readings.get("gpu")
        assert want is not None and abs(device["temperature_celsius"] - want) <= 0.5, raw
        if scenario != "mixed":
            assert sensor in readings
