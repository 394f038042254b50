"""PCIe byte counters that wrap more than once between two reads (fields 197/198, 32 bits).

Above 2^32 bytes per interval (4.3 GB/s at 1 s) a read every cycle misses whole
wraps. Where GPM measures the PCIe link, its bytes since the last read say how
many; where nothing can tell, the counters are left out and the device says so,
never exported as a smaller number, nor lower than they were. The real
nvidia-ml-py binding reads the fake libnvidia-ml.so.1 on frozen simulated time,
stepped with the backend's clock.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from stepped_clock import SteppedClock

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.calls import ErrorTally
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.backends.nvidia.interconnect import (
    PCIE_IO,
    PCIE_MOST_EVER,
    WRAPS_UNKNOWN,
    LinkLayout,
    hidden_wraps,
)
from ray_accel.exporter.backends.nvidia.probes import reading
from ray_accel.exporter.health import unsupported
from ray_accel.exporter.model import DeviceSample, NodeSnapshot
from ray_accel.exporter.simulate import SimulatedHardware
from ray_accel.exporter.validation import ReadingValidator

MIB = 1024 * 1024
WRAP = 2**32
TX, RX = 10e9, 6e9  # bytes a second: two and one whole wraps a second, and some


def _gpu(gpm: bool, tx: float = TX, rx: float = RX, gpm_scale: float = 1.0,
         gen_max: int = 5) -> dict[str, Any]:
    """An H100 on PCIe alone moving `tx`/`rx` bytes a second, its GPM measuring them x
    `gpm_scale` (where it has GPM)."""
    device = {"name": "NVIDIA H100 PCIe", "uuid": "GPU-00000000-0000-4000-8000-000000000001",
              "pci_bus_id": "00000000:10:00.0", "architecture": "hopper", "power_mw": 300000,
              "gpm_supported": gpm,
              "pcie_link": {"gen_current": gen_max, "gen_max": gen_max, "width_current": 16,
                            "width_max": 16},
              "fields": {"197": {"type": "uint", "value": {"start": 9_000_000_000,
                                                           "rate_per_s": tx}},
                         "198": {"type": "uint", "value": {"start": 27_000_000_000,
                                                           "rate_per_s": rx}}}}
    if gpm:
        device["gpm"] = {"graphics_util": 90, "sm_util": 80,
                         "pcie_tx_per_sec": tx * gpm_scale / MIB,
                         "pcie_rx_per_sec": rx * gpm_scale / MIB}
    return device


@pytest.fixture
def start(tmp_path, monkeypatch) -> Iterator[Any]:
    """Starts simulated hardware of one GPU (frozen at t = 0) and opens the backend on it."""
    opened: list[tuple[SimulatedHardware, NvidiaBackend]] = []

    def started(device: dict[str, Any], errors: list[dict[str, Any]] | None = None):
        doc = {"name": "pcie-wraps", "freeze_at_s": 0, "devices": [device],
               "errors": errors or []}
        hardware = SimulatedHardware.start(doc, state_dir=tmp_path / str(len(opened)))
        hardware.activate()
        clock = SteppedClock(1000.0)
        backend = NvidiaBackend(clock=clock, slow_read_interval_s=10.0)
        (gpu,) = backend.open()
        opened.append((hardware, backend))
        return hardware, clock, backend, gpu

    yield started
    for hardware, backend in opened:
        backend.close()
        hardware.close()


def _cycles(started: tuple, seconds: list[float]) -> list[DeviceSample]:
    """One sample at each simulated second of `seconds`, the backend's clock moved alike."""
    hardware, clock, backend, gpu = started
    samples = []
    for second in seconds:
        hardware.modify(lambda doc, t=second: doc.update(freeze_at_s=t))
        time.sleep(0.03)  # the library looks at its state file at most every 10 ms
        clock.now = 1000.0 + second
        samples.append(backend.sample(gpu))
    return samples


def _pcie_bytes(sample: DeviceSample) -> dict[str, float]:
    """direction -> the PCIe byte counter as exported this cycle (absent: left out)."""
    return {dict(r.labels)["direction"]: r.value for link in sample.links
            if link.link_type == m.LINK_PCIE for r in link.readings if r.metric == m.LINK_IO}


def _steps(samples: list[DeviceSample]) -> list[dict[str, float]]:
    """How far the exported counters moved from each cycle to the next."""
    exported = [_pcie_bytes(s) for s in samples]
    return [{d: after[d] - before[d] for d in after}
            for before, after in itertools.pairwise(exported)]


def test_gpm_bytes_tell_how_many_wraps_a_read_every_second_missed(start):
    samples = _cycles(start(_gpu(gpm=True)), [float(s) for s in range(8)])
    assert _steps(samples) == [{m.TRANSMIT: TX, m.RECEIVE: RX}] * 7
    assert all(PCIE_IO not in s.errors for s in samples)


def test_gpm_counting_a_fifth_more_than_the_counters_still_finds_the_wraps(start):
    samples = _cycles(start(_gpu(gpm=True, gpm_scale=1.2)), [float(s) for s in range(6)])
    assert _steps(samples) == [{m.TRANSMIT: TX, m.RECEIVE: RX}] * 5


def test_a_cycle_gpm_missed_leaves_the_counters_out_and_its_bytes_uncounted(start):
    errors = [{"function": "nvmlGpmMetricsGet", "device": 0, "code": "TIMEOUT",
               "from_s": 3, "until_s": 4}]
    samples = _cycles(start(_gpu(gpm=True), errors), [float(s) for s in range(7)])
    exported = [_pcie_bytes(s) for s in samples]
    assert exported[3] == {}  # the wraps since second 2 cannot be told
    assert samples[3].errors[PCIE_IO] == WRAPS_UNKNOWN
    # seconds 2 to 3 count as none; the total carries on from second 2's, never lower
    assert [e[m.TRANSMIT] - exported[2][m.TRANSMIT] for e in exported[4:]] == [TX, 2 * TX, 3 * TX]
    assert [e[m.RECEIVE] - exported[2][m.RECEIVE] for e in exported[4:]] == [RX, 2 * RX, 3 * RX]
    assert PCIE_IO not in samples[4].errors
    # so the readings check, which every sample goes through, refuses none of them
    tally = ErrorTally()
    validator = ReadingValidator(tally, "nvidia")
    assert [_pcie_bytes(validator.check(s)) for s in samples] == exported
    assert tally.snapshot() == {}


def test_without_gpm_counters_that_could_wrap_twice_a_read_are_left_out(start):
    samples = _cycles(start(_gpu(gpm=False)), [float(s) for s in range(4)])
    assert len(_pcie_bytes(samples[0])) == 2  # a first read: where the totals start
    assert [_pcie_bytes(s) for s in samples[1:]] == [{}] * 3
    assert PCIE_IO not in samples[0].errors
    assert all(s.errors[PCIE_IO] == "not_supported" for s in samples[1:])
    snapshot = NodeSnapshot(cycle=4, taken_at=0.0, interval_s=1.0, node_labels={},
                            backends=(), devices=(samples[-1],))
    assert unsupported(snapshot)[PCIE_IO] == [samples[-1].device.uuid]


def test_without_gpm_counters_read_faster_than_their_link_can_wrap_them_twice_count(start):
    # PCIe 3.0 x16 moves at most 16 GB/s: under 2^32 bytes in a quarter second
    samples = _cycles(start(_gpu(gpm=False, tx=3e9, rx=1e9, gen_max=3)),
                      [s / 4 for s in range(8)])
    assert _steps(samples) == [{m.TRANSMIT: 0.75e9, m.RECEIVE: 0.25e9}] * 7
    assert all(PCIE_IO not in s.errors for s in samples)


@pytest.mark.parametrize(("delta", "expected", "most", "wraps"), [
    (100, 2 * WRAP + 90.0, None, 2),  # closest to what GPM measured
    (100, 2.6 * WRAP, None, 3),
    (100, 0.0, None, 0),  # never fewer than none
    (100, 5 * WRAP, 2.5 * WRAP, 2),  # never more than the link could move
    (100, None, WRAP + 99.0, 0),  # the link could not have moved one wrap more
    (100, None, WRAP + 100.0, None),  # ... it could: unknown
    (100, None, None, None),
])
def test_hidden_wraps(delta, expected, most, wraps):
    assert hidden_wraps(delta, expected, most) == wraps


def test_a_gpm_rate_that_cannot_be_true_counts_no_more_wraps_than_pcie_could_move() -> None:
    unknown = LinkLayout()  # no generation or width read: the most any PCIe link moves
    assert unknown.pcie_most == PCIE_MOST_EVER == 512e9
    gen5_x16 = LinkLayout(pcie_max=(reading(m.PCIE_GENERATION, 5, state=m.PCIE_MAX),
                                    reading(m.PCIE_WIDTH, 16, state=m.PCIE_MAX)))
    assert gen5_x16.pcie_most == 64e9
    for layout in (unknown, gen5_x16):
        layout.counter_total(layout.pcie_at, 0, now=0.0)
        layout.schedule.moved = (1e18, 0.0)  # a GPM answer no link could carry
        total = layout.counter_total(layout.pcie_at, 100, now=1.0)
        assert total == 100 + (layout.pcie_most - 100) // WRAP * WRAP
