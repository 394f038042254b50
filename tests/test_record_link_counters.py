"""Link byte counters read only when due are filled in between reads from GPM's rates."""

from __future__ import annotations

import pytest

from ray_accel.exporter.record.link_counters import filled_in


def test_a_burst_between_two_reads_is_placed_where_gpm_saw_it() -> None:
    reads = [(0.0, 0.0), (10.0, 1000.0)]
    rates = [(float(t), 0.0 if t <= 5 else 200.0) for t in range(1, 11)]
    points = dict(filled_in(reads, rates, 1.0))
    assert points[5.0] == 0.0 and points[8.0] == pytest.approx(600.0)
    assert points[10.0] == 1000.0 and sorted(points) == [float(t) for t in range(11)]


def test_a_wrapped_32_bit_counter_is_unwrapped_before_filling_in() -> None:
    reads = [(0.0, 2.0**32 - 100), (4.0, 300.0)]  # 400 bytes, across the wrap
    rates = [(1.0, 100.0), (2.0, 100.0), (3.0, 100.0), (4.0, 100.0)]
    assert [v - reads[0][1] for _, v in filled_in(reads, rates, 1.0, wrap=2**32)] == [
        0.0, 100.0, 200.0, 300.0, 400.0]


def test_reads_of_every_cycle_or_without_rates_are_kept_as_read() -> None:
    every_cycle = [(0.0, 0.0), (1.0, 10.0), (2.0, 30.0)]
    assert filled_in(every_cycle, [(0.5, 5.0), (1.5, 20.0)], 1.0) == every_cycle
    idle = [(0.0, 0.0), (10.0, 100.0)]
    assert filled_in(idle, [(5.0, 0.0)], 1.0) == idle  # GPM saw nothing move: evenly


def test_after_the_last_read_the_counter_goes_on_as_gpm_saw_the_bytes_move() -> None:
    reads = [(0.0, 0.0), (4.0, 400.0)]  # the recording ends at 8 s, before the next read
    rates = [(float(t), 100.0 if t <= 4 else 50.0) for t in range(1, 9)]
    points = dict(filled_in(reads, rates, 1.0))
    assert [points[float(t)] for t in range(4, 9)] == [400.0, 450.0, 500.0, 550.0, 600.0]
    # a read at the last cycle leaves nothing to go on from
    assert filled_in([(0.0, 0.0), (1.0, 10.0)], [(1.0, 10.0)], 1.0) == [(0.0, 0.0), (1.0, 10.0)]
