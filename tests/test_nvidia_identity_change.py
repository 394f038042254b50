"""A device that changes under a running agent is identified again, never shown as the old one.

Real agent processes on the fake NVML, whose scenario is changed while they run:
another GPU answers at an index (a new UUID, serial, name and values), and MIG
instances are destroyed, created and MIG turned off on an A100. The agent checks
each device's identity at its slow cadence (here every cycle): the old device's
series end and the one there now is listed under its own UUID.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_process import AgentProcess
from nvml_scenarios import scenario

from ray_accel.exporter.simulate import SimulatedHardware

SCENARIOS = Path(__file__).resolve().parent.parent / "exporter" / "simulate" / "scenarios"
NEW_GPU = "GPU-11111111-2222-3333-4444-555555555555"
NEW_MIG = "MIG-12345678-1234-1234-1234-123456789abc"
FLAGS = ("--interval", "0.3", "--slow-read-interval", "0")


def _uuids(doc: dict) -> list[str]:
    return [d["uuid"] for d in doc["devices"]]


def _memory_used(device: dict) -> float | None:
    found = device["values"].get("hw.gpu.memory.usage") or []
    return found[0]["value"] if found else None


def test_another_gpu_at_an_index_is_listed_under_its_own_identity(tmp_path):
    with SimulatedHardware.start(scenario(devices=2, freeze_at_s=None),
                                 state_dir=tmp_path / "hw") as hardware, \
            AgentProcess(*FLAGS, env=hardware.environ()) as agent:
        before = agent.wait_for(lambda d: len(d["devices"]) == 2
                                and all(x["up"] for x in d["devices"]))
        old = before["devices"][1]["uuid"]

        def swap(doc: dict[str, Any]) -> None:
            gpu = doc["devices"][1]
            gpu.update(uuid=NEW_GPU, serial="9999999999999", name="NVIDIA H100 NVL",
                       memory_used_bytes=1000, processes=[])

        hardware.modify(swap)
        # the cycle after it joined, GPU 0 names it as its peer too: the old one is gone
        after = agent.wait_for(lambda d: NEW_GPU in _uuids(d) and old not in json.dumps(d)
                               and all(x["up"] for x in d["devices"]), timeout=30)
        assert _uuids(after) == [before["devices"][0]["uuid"], NEW_GPU]
        (new,) = [d for d in after["devices"] if d["uuid"] == NEW_GPU]
        assert new["model"] == "NVIDIA H100 NVL" and new["index"] == "1"
        assert _memory_used(new) == 1000
        _, _, metrics = agent.get("/metrics")
        assert old not in metrics.decode()  # its series ended with it
        assert agent.json("/healthz")["status"] == "ok"


@pytest.fixture
def a100_mig(tmp_path):
    doc = json.loads((SCENARIOS / "a100-mig.json").read_text())
    with SimulatedHardware.start(doc, state_dir=tmp_path / "hw") as hardware:
        yield hardware


def _migs(doc: dict) -> dict[str, str]:
    """MIG instance uuid -> its index."""
    return {d["uuid"]: d["index"] for d in doc["devices"] if d["uuid"].startswith("MIG-")}


def test_mig_instances_made_and_destroyed_while_running_are_listed_as_they_are(a100_mig):
    with AgentProcess(*FLAGS, env=a100_mig.environ()) as agent:
        start = agent.wait_for(lambda d: _migs(d) and all(x["up"] for x in d["devices"]))
        first = list(_migs(start))
        gone = start["devices"][[d["uuid"] for d in start["devices"]].index(first[0])]

        def destroy_first(doc: dict[str, Any]) -> None:
            del doc["devices"][0]["mig_devices"][0]

        a100_mig.modify(destroy_first)
        after = agent.wait_for(lambda d: set(_migs(d)) == set(first[1:])
                               and gone["uuid"] not in json.dumps(d)
                               and all(x["up"] for x in d["devices"]), timeout=30)
        assert _migs(after) == {uuid: _migs(start)[uuid] for uuid in first[1:]}
        assert gone["uuid"] not in agent.get("/metrics")[2].decode()

        def create(doc: dict[str, Any]) -> None:
            doc["devices"][0]["mig_devices"].append({
                "name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "uuid": NEW_MIG,
                "gpu_instance_id": 13, "compute_instance_id": 0,
                "memory_total_bytes": 10468982784, "memory_used_bytes": 5000})

        a100_mig.modify(create)
        made = agent.wait_for(lambda d: NEW_MIG in _migs(d)
                              and all(x["up"] for x in d["devices"]), timeout=30)
        assert _migs(made)[NEW_MIG] == "0/13/0"

        def mig_off(doc: dict[str, Any]) -> None:
            doc["devices"][0].update(mig_mode=False, mig_devices=[])

        a100_mig.modify(mig_off)
        off = agent.wait_for(lambda d: not _migs(d) and all(x["up"] for x in d["devices"]),
                             timeout=30)
        assert agent.json("/healthz")["status"] == "ok"
        assert len(off["devices"]) == len(start["devices"]) - len(first)
