"""Judgements on GPM activity: idle holders, spinning devices, hung collectives.

Unit tests build samples directly; the last ones check that the simulated GPM
activity follows simulated processes, as NVML's utilization does, so that the
Ray demos and tests judge workers by what they really do.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pynvml
import pytest
from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter import catalog as m
from ray_accel.exporter.activity import (
    RULE_ACTIVITY,
    RULE_UTILIZATION,
    SPIN_WINDOW_S,
    SpinningWindow,
    activity_of,
)
from ray_accel.exporter.attribution.join import RULE_NO_CONTEXT, allocations
from ray_accel.exporter.attribution.model import Holder, RayIdentity
from ray_accel.exporter.backends.base import ErrorTally
from ray_accel.exporter.backends.nvidia.calls import DeviceCalls
from ray_accel.exporter.backends.nvidia.gpm import GpmActivity
from ray_accel.exporter.collective import CollectiveStallDetector, CollectiveStallSettings
from ray_accel.exporter.model import Device, DeviceSample, Link, ProcessSample, Reading, labels_of
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.simulate.contexts import for_real_processes
from ray_accel.exporter.simulate.patterns import hung_collective

DEVICE = Device("nvidia", "0", "GPU-0", "NVIDIA H100")


def sample(utilization: float | None = 1.0, graphics: float | None = None,
           sm: float | None = None, tensor: float | None = None, taken_at: float = 0.0,
           processes: tuple[ProcessSample, ...] = (), link_rate: float | None = None
           ) -> DeviceSample:
    readings = []
    if utilization is not None:
        readings.append(Reading(m.GPU_UTILIZATION, utilization, labels_of({"task": "general"})))
    for engine, value in (("graphics", graphics), ("sm", sm)):
        if value is not None:
            readings.append(Reading(m.ACTIVITY, value, labels_of({"engine": engine})))
    if tensor is not None:
        readings.append(Reading(m.PIPE_ACTIVITY, tensor, labels_of({"pipe": "tensor"})))
    links = () if link_rate is None else (
        Link("nvlink", 0, rates={"transmit": link_rate, "receive": link_rate}),)
    return DeviceSample(DEVICE, True, taken_at, readings=tuple(readings),
                        processes=processes, links=links)


def process(pid: int, sm: float) -> ProcessSample:
    return ProcessSample(pid, (Reading(m.PROCESS_UTILIZATION, sm, labels_of({"engine": "sm"})),))


def holder(pid: int, fraction: float = 1.0) -> Holder:
    return Holder(RayIdentity(pid, actor_id=f"actor-{pid}"), fraction)


# --------------------------------------------------------------------------
# The definitions
# --------------------------------------------------------------------------


def test_idle_is_judged_by_graphics_activity_where_measured():
    assert activity_of(sample(utilization=1.0, graphics=0.0)).idle is True
    assert activity_of(sample(utilization=1.0, graphics=0.0)).rule == RULE_ACTIVITY
    assert activity_of(sample(utilization=0.0, graphics=0.3)).idle is False
    assert activity_of(sample(utilization=0.0)).idle is True
    assert activity_of(sample(utilization=0.0)).rule == RULE_UTILIZATION
    assert activity_of(sample(utilization=None)).idle is None


def test_spinning_is_busy_utilization_without_sm_or_tensor_work():
    assert activity_of(sample(utilization=1.0, graphics=1.0, sm=0.02, tensor=0.0)).spinning
    assert not activity_of(sample(utilization=1.0, graphics=1.0, sm=0.9, tensor=0.6)).spinning
    assert not activity_of(sample(utilization=1.0, graphics=1.0, sm=0.02, tensor=0.4)).spinning
    assert not activity_of(sample(utilization=0.3, graphics=0.3, sm=0.01)).spinning
    assert activity_of(sample(utilization=1.0)).spinning is None  # no GPM: cannot tell


def test_spinning_needs_the_whole_window():
    window = SpinningWindow(window_s=10.0)
    spin = activity_of(sample(utilization=1.0, graphics=1.0, sm=0.02, tensor=0.0))
    work = activity_of(sample(utilization=1.0, graphics=1.0, sm=0.9, tensor=0.5))
    verdicts = [window.update(view, t) for t, view in
                ((0, spin), (5, spin), (10, spin), (11, work), (12, spin), (21, spin), (22, spin))]
    assert verdicts == [False, False, True, False, False, False, True]
    assert window.update(activity_of(sample(utilization=1.0)), 30) is None  # no GPM


def test_backend_says_spinning_after_the_window(nvml):
    nvml({"name": "t", "freeze_at_s": 10, "devices": [
        _gpu(gpm={"graphics_util": 100, "sm_util": 2, "any_tensor_util": 0}),
        _gpu(1, gpm={"graphics_util": 100, "sm_util": 93, "any_tensor_util": 70})]})
    now = [0.0]
    devices = [(GpmActivity(clock=lambda: now[0]), DeviceCalls(ErrorTally()),
                pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(2)]

    def spinning() -> list[list[float]]:
        return [[r.value for r in gpm.read(calls, handle, 1.0) if r.metric == m.DEVICE_SPINNING]
                for gpm, calls, handle in devices]

    assert spinning() == [[], []]  # the first cycle measures nothing
    assert spinning() == [[0.0], [0.0]]
    now[0] += SPIN_WINDOW_S
    assert spinning() == [[1.0], [0.0]]  # busy while computing is not spinning
    gpm, calls, handle = devices[0]
    assert not any(r.metric == m.DEVICE_SPINNING for r in gpm.read(calls, handle, None))


# --------------------------------------------------------------------------
# Holders
# --------------------------------------------------------------------------


def test_a_whole_device_holder_takes_the_device_activity():
    holders = {"GPU-0": (holder(10),)}
    busy = allocations(sample(utilization=1.0, graphics=0.6, processes=(process(10, 0.0),)),
                       holders)
    assert [(a.idle, a.rule, a.shared) for a in busy] == [(False, RULE_ACTIVITY, False)]
    assert busy[0].activity is not None and busy[0].activity.graphics == 0.6
    # NVML says 100 % (a kernel is resident), the graphics engine says nothing runs
    resting = allocations(sample(utilization=1.0, graphics=0.0, processes=(process(10, 0.5),)),
                          holders)
    assert [(a.idle, a.rule) for a in resting] == [(True, RULE_ACTIVITY)]


def test_fractional_holders_keep_their_process_figures_and_are_shared():
    holders = {"GPU-0": (holder(10, 0.5), holder(11, 0.5))}
    found = allocations(sample(utilization=0.6, graphics=0.6,
                               processes=(process(10, 0.6), process(11, 0.0))), holders)
    assert [(a.holder.identity.pid, a.idle, a.rule, a.shared) for a in found] == [
        (10, False, RULE_UTILIZATION, True), (11, True, RULE_UTILIZATION, True)]


def test_a_whole_holder_of_a_spinning_device_is_spinning_not_idle():
    spinning = sample(utilization=1.0, graphics=1.0, sm=0.02, processes=(process(10, 1.0),))
    spinning = DeviceSample(DEVICE, True, 0.0, readings=(
        *spinning.readings, Reading(m.DEVICE_SPINNING, 1.0)), processes=spinning.processes)
    found = allocations(spinning, {"GPU-0": (holder(10),)})
    assert [(a.idle, a.spinning, a.rule) for a in found] == [(False, True, RULE_ACTIVITY)]


def test_a_holder_without_a_context_is_idle_whatever_the_device_does():
    found = allocations(sample(utilization=1.0, graphics=0.9), {"GPU-0": (holder(10),)})
    assert [(a.idle, a.rule) for a in found] == [(True, RULE_NO_CONTEXT)]


def test_without_gpm_the_utilization_rule_stays():
    holders = {"GPU-0": (holder(10),)}
    found = allocations(sample(utilization=0.5, processes=(process(10, 0.5),)), holders)
    assert [(a.idle, a.rule) for a in found] == [(False, RULE_UTILIZATION)]


# --------------------------------------------------------------------------
# Hung collectives
# --------------------------------------------------------------------------


def verdicts(**figures: Any) -> list[bool | None]:
    detector = CollectiveStallDetector(CollectiveStallSettings(window_s=10.0))
    return [detector.update([sample(taken_at=t, link_rate=0.0, **figures)]).get("GPU-0")
            for t in (0.0, 5.0, 10.0, 15.0)]


def test_the_hung_pattern_is_suspected_with_and_without_gpm():
    assert verdicts(utilization=1.0, graphics=1.0, sm=0.02, tensor=0.0) == [
        False, False, True, True]
    assert verdicts(utilization=1.0) == [False, False, True, True]  # no GPM: the old rule


def test_a_compute_bound_device_with_flat_links_is_not_suspected():
    assert verdicts(utilization=1.0, graphics=1.0, sm=0.95, tensor=0.7) == [False] * 4


# --------------------------------------------------------------------------
# Simulated activity follows simulated processes
# --------------------------------------------------------------------------


def _gpu(index: int = 0, **keys: Any) -> dict[str, Any]:
    return {"name": "NVIDIA H100", "uuid": f"GPU-00000000-0000-4000-8000-{index:012x}",
            "pci_bus_id": f"00000000:{0x10 + index:02X}:00.0", "architecture": "hopper", **keys}


def _sm_activity(first: Any, second: Any) -> float:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = 2
    request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    request.metrics[1].metricId = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    request.sample1, request.sample2 = first, second
    pynvml.nvmlGpmMetricsGet(request)
    assert request.metrics[1].value == 0.0  # processes add SM, not tensor, activity
    return request.metrics[0].value


def test_live_processes_add_their_sm_share_to_gpm_activity(tmp_path: pathlib.Path):
    doc = {"name": "t", "freeze_at_s": 10, "devices": [_gpu(
        load_from_processes=True, gpm={"sm_util": 10, "any_tensor_util": 0},
        processes=[{"pid": 1, "sm_percent": 30}, {"pid": 2**31, "sm_percent": 50,
                                                   "while_alive": True}])]}
    with SimulatedHardware.start(doc, state_dir=tmp_path / "hw") as hardware:
        hardware.activate()
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
            pynvml.nvmlGpmSampleGet(handle, first)
            time.sleep(0.02)
            pynvml.nvmlGpmSampleGet(handle, second)
            # pid 1 is alive (init); the "while_alive" pid is not: 10 + 30
            assert _sm_activity(first, second) == pytest.approx(40.0)
        finally:
            pynvml.nvmlShutdown()


def test_scenarios_driven_by_processes_start_with_gpm_at_zero():
    document = for_real_processes("hgx-h200")
    for device in document["devices"]:
        gpm = device["gpm"]
        assert gpm["sm_util"] == 0 and gpm["any_tensor_util"] == 0
        assert gpm["nvlink_tx_per_sec"] == {"*": 0}


def test_agent_suspects_the_spinning_gpus_not_the_compute_bound_one(tmp_path: pathlib.Path):
    hw = SimulatedHardware.start("hgx-h200", state_dir=tmp_path)

    def hang_two_and_flatten_a_third(scenario: dict[str, Any]) -> None:
        at_s = max(hw.elapsed_s(), 0.0)
        scenario.update(hung_collective(scenario, [0, 1, 2], at_s))
        # GPU 2 computes for real with flat links: a worker that does not communicate
        scenario["devices"][2]["gpm"].update(sm_util=92, any_tensor_util=70, graphics_util=100)

    with AgentProcess("--interval", "0.5", "--collective-stall-window", "2",
                      env=hw.environ()) as agent:
        agent.wait_for(lambda d: all("collective_suspected_stall" in x for x in d["devices"]))
        hw.modify(hang_two_and_flatten_a_third)
        agent.wait_for(lambda d: [x["collective_suspected_stall"] for x in d["devices"]][:2]
                       == [True, True], timeout=15)
        time.sleep(1.5)  # GPU 2 had as long to be (wrongly) suspected
        _, _, body = agent.get("/metrics")
        families = list(parse_text(body.decode()))
        found = {s.labels["index"]: s.value for f in families for s in f.samples
                 if s.name == "ray_accelerator_collective_suspected_stall"}
        assert found["0"] == found["1"] == 1
        assert found["2"] == 0
        sm = {s.labels["index"]: s.value for f in families for s in f.samples
              if s.name == "ray_accelerator_activity_ratio" and s.labels["engine"] == "sm"}
        assert sm["0"] == pytest.approx(0.02, abs=0.01) and sm["2"] > 0.9
        # a state of its own once it lasted the spinning window; GPU 2 computes
        doc = agent.wait_for(lambda d: [spinning_of(x) for x in d["devices"]][:3]
                             == [1.0, 1.0, 0.0], timeout=SPIN_WINDOW_S + 10)
        assert [spinning_of(x) for x in doc["devices"]][3:] == [0.0] * 5


def spinning_of(device: dict[str, Any]) -> float | None:
    values = device["values"].get(m.DEVICE_SPINNING)
    return values[0]["value"] if values else None
