"""Links a backend hands back unchanged: the reading checks and the rates keep them as they were.

The NVIDIA backend returns the same links tuple while none of its links was read
again (most cycles where GPM measures the links). The checks (validation.py) and
the rates (rates.py `LinkRates`) then pass it on without looking at each link;
what they give must be what looking at each link gives.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from stepped_clock import SteppedClock

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.base import ErrorTally
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.model import Device, DeviceSample, Link, Reading
from ray_accel.exporter.rates import LinkRates, with_link_rates
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.validation import COUNTER_DECREASED, OUT_OF_RANGE, ReadingValidator

GPU = Device("nvidia", "0", "GPU-0", "NVIDIA H200")
TX = (("direction", "transmit"),)


def _fresh_links(sample: DeviceSample) -> DeviceSample:
    """The sample with its links in a tuple of their own (the same links)."""
    return replace(sample, links=tuple(list(sample.links)))


@pytest.fixture
def h200(tmp_path):
    hardware = SimulatedHardware.start("hgx-h200", state_dir=tmp_path)
    hardware.activate()
    clock = SteppedClock(1000.0)
    backend = NvidiaBackend(clock=clock, slow_read_interval_s=10.0)
    devices = backend.open()
    yield clock, backend, devices[0]
    backend.close()
    hardware.close()


def test_an_h200s_links_checked_and_rated_as_a_whole_are_what_link_by_link_gives(h200):
    clock, backend, gpu = h200
    whole_tally, each_tally = ErrorTally(), ErrorTally()
    whole, each = ReadingValidator(whole_tally), ReadingValidator(each_tally)
    rates = LinkRates()
    whole_last = each_last = None
    handed_back = 0
    before = None
    for _ in range(25):  # two slow reads of the link values among them
        clock.now += 1.0
        time.sleep(0.02)  # the simulated counters move on
        sample = backend.sample(gpu)
        if before is not None and sample.links is before.links:
            handed_back += 1
        before = sample
        whole_last = rates.of(whole_last, whole.check(sample))
        each_last = with_link_rates(each_last, each.check(_fresh_links(sample)))
        assert whole_last == each_last
    assert handed_back >= 10, "the backend no longer hands back unchanged links"
    assert any(link.rates for link in whole_last.links)
    assert whole_tally.snapshot() == each_tally.snapshot()


def test_the_same_links_with_a_value_that_cannot_be_true_are_refused_each_time():
    tally = ErrorTally()
    validator = ReadingValidator(tally)
    links = (Link("nvlink", 0, (Reading(m.LINK_IO, 1000.0, TX), Reading(m.LINK_UP, 3.0))),)
    for _ in range(3):
        out = validator.check(DeviceSample(GPU, up=True, taken_at=time.time(), links=links))
        assert [r.metric for r in out.links[0].readings] == [m.LINK_IO]
    assert tally.snapshot() == {(OUT_OF_RANGE, m.LINK_UP): 3}


def test_the_same_links_after_a_loss_count_their_counters_from_there():
    tally = ErrorTally()
    validator = ReadingValidator(tally)
    unchanged = (Link("nvlink", 0, (Reading(m.LINK_IO, 1000.0, TX),)),)
    for up in (True, True, False, True):  # lost once: its counters are forgotten
        validator.check(DeviceSample(GPU, up=up, taken_at=time.time(),
                                     links=unchanged if up else ()))
    lower = (Link("nvlink", 0, (Reading(m.LINK_IO, 900.0, TX),)),)
    out = validator.check(DeviceSample(GPU, up=True, taken_at=time.time(), links=lower))
    assert out.links[0].readings == ()
    assert tally.snapshot() == {(COUNTER_DECREASED, m.LINK_IO): 1}


def test_unstamped_links_handed_back_get_their_rates_again():
    """Without a time of their own read, the same counters a second later are no bytes moved."""
    rates = LinkRates()
    links = (Link("nvlink", 0, (Reading(m.LINK_IO, 1000.0, TX),)),)
    first = rates.of(None, DeviceSample(GPU, up=True, taken_at=10.0, links=links))
    moved = (Link("nvlink", 0, (Reading(m.LINK_IO, 3000.0, TX),)),)
    second = rates.of(first, DeviceSample(GPU, up=True, taken_at=11.0, links=moved))
    third = rates.of(second, DeviceSample(GPU, up=True, taken_at=12.0, links=moved))
    assert [dict(s.links[0].rates) for s in (second, third)] == [{"transmit": 2000.0},
                                                                  {"transmit": 0.0}]


def test_stamped_links_handed_back_keep_the_rates_of_their_read():
    rates = LinkRates()
    earlier = (Link("nvlink", 0, (Reading(m.LINK_IO, 1000.0, TX),), counters_at=10.0),)
    first = rates.of(None, DeviceSample(GPU, up=True, taken_at=10.0, links=earlier))
    read = (Link("nvlink", 0, (Reading(m.LINK_IO, 3000.0, TX),), counters_at=11.0),)
    second = rates.of(first, DeviceSample(GPU, up=True, taken_at=11.0, links=read))
    third = rates.of(second, DeviceSample(GPU, up=True, taken_at=12.0, links=read))
    assert third.links is second.links
    assert dict(third.links[0].rates) == {"transmit": 2000.0}
    # Another sample in between (the device was down): the links are rated anew.
    down = DeviceSample(GPU, up=False, taken_at=13.0)
    fourth = rates.of(down, DeviceSample(GPU, up=True, taken_at=14.0, links=read))
    assert fourth.links == read
