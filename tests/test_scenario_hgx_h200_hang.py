"""The shipped hgx-h200 scenario's hung collective: GPUs 0 and 1 from 240 s to 360 s.

Read through the same signal and counter functions the C fake mirrors: inside the
hang the two GPUs are busy by utilization with their SMs nearly idle and every link
counter flat; outside it they train as before (their 120 s training curve, twice),
and the other GPUs never hang.
"""

from __future__ import annotations

import pytest

from ray_accel.exporter.simulate import SimulatedHardware, load_scenario
from ray_accel.exporter.simulate.signals import counter_at, value_at

HANG = (240.0, 360.0)
HUNG = (0, 1)
LINK_COUNTERS = ("138", "139")
PCIE_COUNTERS = ("197", "198")


@pytest.fixture(scope="module")
def devices() -> list[dict]:
    return load_scenario("hgx-h200")["devices"]


def _counters(device: dict, t: float) -> list[int]:
    fields = device["fields"]
    return ([counter_at(fields[n]["*"], t) for n in LINK_COUNTERS]
            + [counter_at(fields[n]["value"], t) for n in PCIE_COUNTERS])


@pytest.mark.parametrize("index", HUNG)
def test_inside_the_hang_the_gpu_spins_with_flat_links(devices, index):
    device = devices[index]
    for t in (241.0, 300.0, 359.0):
        assert value_at(device["utilization_gpu_percent"], t) == 100
        assert value_at(device["gpm"]["sm_util"], t) == 2
        assert value_at(device["gpm"]["any_tensor_util"], t) == 0
        assert value_at(device["gpm"]["nvlink_tx_per_sec"]["*"], t) == 0
    assert _counters(device, 245.0) == _counters(device, 355.0)  # flat for the whole hang
    assert _counters(device, 200.0) != _counters(device, 239.0)  # moving while it trains


@pytest.mark.parametrize("index", HUNG)
def test_outside_the_hang_the_gpu_trains_on_its_120_s_curve(devices, index):
    device = devices[index]
    for t in (1.0, 33.0, 60.0, 91.0, 119.0):
        for signal in (device["utilization_gpu_percent"], device["gpm"]["sm_util"],
                       device["power_mw"]):
            assert value_at(signal, t) == pytest.approx(value_at(signal, t + 120.0))
        assert value_at(device["gpm"]["sm_util"], t) > 40  # computing, not spinning
    # the period wraps back into training
    assert value_at(device["utilization_gpu_percent"], 361.0) == pytest.approx(
        value_at(device["utilization_gpu_percent"], 1.0))


def test_no_other_gpu_hangs(devices):
    for index, device in enumerate(devices):
        if index in HUNG:
            continue
        for t in (250.0, 300.0, 350.0):
            sm = value_at(device["gpm"]["sm_util"], t)
            busy = value_at(device["utilization_gpu_percent"], t)
            assert not (busy >= 80 and sm <= 5), (index, t)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_start_time_before_the_scenario_is_refused(bad):
    with pytest.raises(ValueError, match="at_s"):
        SimulatedHardware.start("hgx-h200", at_s=bad)
