"""Gaudi attribution end to end: a real Ray head with simulated Gaudi cards, an actor, the agent.

Ray finds Gaudi cards only through habana_frameworks, so the head is told its
``HPU`` with --resources, and its raylet sees the cards' module ids in a
permuted order (HABANA_VISIBLE_MODULES), so slot-to-module mapping is really
exercised. HLML lists no processes: the actor is placed from Ray's allocation
alone, and it is idle or not as the card it holds is.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent_process import AgentProcess
from family_ray import driven_actor, family_head

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware

RAYLET_MODULES = ("5", "4", "7", "6", "1", "0", "3", "2")
DRIVER = """
import json, os, sys
import ray
ray.init(address=sys.argv[1])

@ray.remote(num_cpus=0, resources={"HPU": 2})
class GaudiUser:
    def start(self):
        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "actor_id": context.get_actor_id(),
                "visible": os.environ.get("HABANA_VISIBLE_MODULES", "")}

user = GaudiUser.remote()
print(json.dumps(ray.get(user.start.remote())), flush=True)
sys.stdin.readline()
"""


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def hardware(tmp_path_factory) -> Iterator[SimulatedHardware]:
    hw = SimulatedHardware.start("gaudi2-8", state_dir=tmp_path_factory.mktemp("gaudi-hw"))
    yield hw
    hw.close()


@pytest.fixture(scope="module")
def cluster(hardware) -> Iterator[LocalRayCluster]:
    with family_head(hardware, "rg-", "HPU", "HABANA_VISIBLE_MODULES", RAYLET_MODULES) as local:
        yield local


@pytest.fixture(scope="module")
def actor(cluster) -> Iterator[dict]:
    with driven_actor(cluster, DRIVER) as reported:
        yield reported


def test_an_actor_holding_hpus_is_shown_on_its_cards_idle_as_they_are(cluster, hardware, actor):
    visible = actor["visible"].split(",")
    assert len(visible) == 2 and set(visible) <= set(RAYLET_MODULES)
    resting, working = visible

    def set_load(scenario: dict) -> None:  # the first of its cards rests, the second works
        for card in scenario["gaudi"]["devices"]:
            if str(card["module_id"]) in visible:
                card["utilization_percent"] = 0 if str(card["module_id"]) == resting else 80

    hardware.modify(set_load)
    args = ("--ray-address", cluster.gcs_address, "--interval", "0.5",
            "--attribution-interval", "0.25")
    with AgentProcess(*args, env=hardware.environ(), ray=True) as agent:
        def holders(doc: dict) -> dict[str, list]:
            return {d["facts"].get("module_id", ""): d.get("holders", []) for d in doc["devices"]
                    if d["vendor"] == "intel"}

        doc = agent.wait_for(
            lambda d: all(any(h["pid"] == actor["pid"] for h in holders(d).get(module, ()))
                          for module in visible), timeout=90)
        held = holders(doc)
        assert {module for module, found in held.items() if found} == set(visible)
        for module in visible:
            (holder,) = held[module]
            assert holder["ray_actor_id"] == actor["actor_id"]
            assert holder["fraction"] == 1.0
        assert held[resting][0]["idle"] is True
        assert held[working][0]["idle"] is False
