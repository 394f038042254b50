"""TPU attribution end to end: a real Ray head with simulated TPU chips, an actor, the agent.

Ray finds TPU chips only in the real /dev, so the head is told its ``TPU`` with
--resources, and its raylet sees the chips in a permuted order
(TPU_VISIBLE_CHIPS), so slot-to-chip mapping is really exercised. The actor
opens the device files of the chips Ray gave it, as libtpu does, and the agent
finds it through /proc/<pid>/fd.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent_process import AgentProcess
from family_ray import driven_actor, family_head

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware

RAYLET_CHIPS = ("3", "2", "1", "0", "7", "6", "5", "4")
DRIVER = """
import json, os, sys
import ray
ray.init(address=sys.argv[1])

@ray.remote(num_cpus=0, resources={"TPU": 2})
class TpuUser:
    def start(self):
        from ray_accel.exporter.simulate.tpu_fake import open_chips
        files = open_chips()
        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "actor_id": context.get_actor_id(), "files": files,
                "visible": os.environ.get("TPU_VISIBLE_CHIPS", "")}

user = TpuUser.remote()
print(json.dumps(ray.get(user.start.remote())), flush=True)
sys.stdin.readline()
"""


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def hardware(tmp_path_factory) -> Iterator[SimulatedHardware]:
    hw = SimulatedHardware.start("tpu-v5e-8", state_dir=tmp_path_factory.mktemp("tpu-hw"))
    yield hw
    hw.close()


@pytest.fixture(scope="module")
def cluster(hardware) -> Iterator[LocalRayCluster]:
    with family_head(hardware, "rt-", "TPU", "TPU_VISIBLE_CHIPS", RAYLET_CHIPS) as local:
        yield local


@pytest.fixture(scope="module")
def actor(cluster) -> Iterator[dict]:
    with driven_actor(cluster, DRIVER) as reported:
        yield reported


def test_an_actor_holding_tpu_chips_is_shown_on_its_chips(cluster, hardware, actor):
    visible = actor["visible"].split(",")
    assert len(visible) == 2 and set(visible) <= set(RAYLET_CHIPS)
    assert len(actor["files"]) == 2  # the actor really opened two chips' files
    args = ("--ray-address", cluster.gcs_address, "--interval", "0.5",
            "--attribution-interval", "0.25")
    with AgentProcess(*args, env=hardware.environ(), ray=True) as agent:
        def holders(doc: dict) -> dict[str, list]:
            return {d["index"]: d.get("holders", []) for d in doc["devices"]
                    if d["vendor"] == "google"}

        doc = agent.wait_for(
            lambda d: all(any(h["pid"] == actor["pid"] for h in holders(d).get(chip, ()))
                          for chip in visible), timeout=90)
        held = {chip for chip, found in holders(doc).items() if found}
        assert held == set(visible)
        for device in doc["devices"]:
            if device["vendor"] == "google" and device["index"] in visible:
                (holder,) = device["holders"]
                assert holder["ray_actor_id"] == actor["actor_id"]
                assert holder["fraction"] == 1.0
                (process,) = device["processes"]
                assert process["pid"] == actor["pid"]
                assert process["ray_actor_id"] == actor["actor_id"]
