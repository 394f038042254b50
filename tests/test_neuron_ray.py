"""Neuron attribution end to end: a real Ray head with simulated NeuronCores, an actor, the agent.

Ray finds NeuronCores only through /opt/aws/neuron/bin/neuron-ls, so the head
is told its ``neuron_cores`` with --resources, and its raylet sees them in a
permuted order (NEURON_RT_VISIBLE_CORES), so slot-to-core mapping is really
exercised. The actor opens a simulated Neuron runtime on the cores Ray gave it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent_process import AgentProcess
from family_ray import driven_actor, family_head

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.neuron_fake import driven_by_processes

RAYLET_CORES = ("7", "6", "5", "4", "11", "10", "9", "8")
DRIVER = """
import json, os, sys
import ray
ray.init(address=sys.argv[1])

@ray.remote(num_cpus=0, resources={"neuron_cores": 2})
class NeuronUser:
    def start(self):
        from ray_accel.exporter.simulate.neuron_fake import open_runtime
        open_runtime(memory_bytes=2**30, utilization_percent=50)
        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "actor_id": context.get_actor_id(),
                "visible": os.environ.get("NEURON_RT_VISIBLE_CORES", "")}

user = NeuronUser.remote()
print(json.dumps(ray.get(user.start.remote())), flush=True)
sys.stdin.readline()
"""


pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def hardware(tmp_path_factory) -> Iterator[SimulatedHardware]:
    hw = SimulatedHardware.start(driven_by_processes("trn1-32xl"),
                                 state_dir=tmp_path_factory.mktemp("neuron-hw"))
    yield hw
    hw.close()


@pytest.fixture(scope="module")
def cluster(hardware) -> Iterator[LocalRayCluster]:
    with family_head(hardware, "rn-", "neuron_cores", "NEURON_RT_VISIBLE_CORES",
                     RAYLET_CORES) as local:
        yield local


@pytest.fixture(scope="module")
def actor(cluster) -> Iterator[dict]:
    with driven_actor(cluster, DRIVER) as reported:
        yield reported


def test_an_actor_holding_neuron_cores_is_shown_on_its_cores(cluster, hardware, actor):
    visible = actor["visible"].split(",")
    assert len(visible) == 2 and set(visible) <= set(RAYLET_CORES)
    args = ("--ray-address", cluster.gcs_address, "--interval", "0.5",
            "--attribution-interval", "0.25")
    with AgentProcess(*args, env=hardware.environ(), ray=True) as agent:
        def holders(doc: dict) -> dict[str, list]:
            return {d["facts"].get("neuroncore", ""): d.get("holders", []) for d in doc["devices"]
                    if d["vendor"] == "aws"}

        doc = agent.wait_for(
            lambda d: all(any(h["pid"] == actor["pid"] for h in holders(d).get(core, ()))
                          for core in visible), timeout=90)
        held = {core for core, found in holders(doc).items() if found}
        assert held == set(visible)
        for device in doc["devices"]:
            if device["facts"].get("neuroncore") in visible:
                (holder,) = device["holders"]
                assert holder["ray_actor_id"] == actor["actor_id"]
                assert holder["fraction"] == 1.0
                (process,) = device["processes"]
                assert process["pid"] == actor["pid"]
                assert process["ray_actor_id"] == actor["actor_id"]
