"""Per-XCC activity and clock-limit residency from amdsmi's GPU metrics table.

`amdsmi_get_gpu_metrics_info` (ROCm 6.3+, GPU metrics 1.6 and newer) lists,
per XCP (compute partition) and XCC within it, the graphics engine's busy
percent (`xcp_stats.gfx_busy_inst`, a list of lists). In SPX mode XCP 0 holds
every XCC of the GPU and the other rows are "N/A"; in CPX each XCP has one.

The same table holds accumulators the SMU firmware advances in the ticks of
its `accumulation_counter`: throttle residency per limiter (1.6:
`ppt_residency_acc`, ...) and, per XCC, the time the graphics clock was held
below the host's limit by power, thermals or low utilization (1.8,
`xcp_stats.gfx_below_host_limit_*_acc`, `xcp_stats.gfx_low_utilization_acc`;
1.7 had one total, `xcp_stats.gfx_below_host_limit_acc`). amdsmi's own
violation status divides their growth by the counter's over 100 ms; here the
interval is the one between two sampling cycles, so no sleep is needed and no
time between cycles goes unseen; the backend takes `throttle.active` from these
ratios too, and calls the violation status only when they are missing. Ticks
have no documented length, so the residencies are exported as ratios, never as
seconds.

Anything the table does not hold (an older amdsmi without the key, "N/A" from
an older driver, the call unsupported) is absent, never zero.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ... import catalog as m
from ...model import Labels, Reading, labels_of
from .calls import number
from .probes import percent

METRICS_TABLE = "amdsmi_get_gpu_metrics_info"
TICKS = "accumulation_counter"
BUSY = "xcp_stats.gfx_busy_inst"
# device-level residency accumulator -> throttle reason (as amdsmi's violation status names)
DEVICE_RESIDENCY: tuple[tuple[str, str], ...] = (
    ("ppt_residency_acc", m.REASON_SW_POWER_CAP),
    ("socket_thm_residency_acc", m.REASON_SOCKET_THERMAL),
    ("prochot_residency_acc", m.REASON_PROCHOT),
    ("vr_thm_residency_acc", m.REASON_VR_THERMAL),
    ("hbm_thm_residency_acc", m.REASON_HBM_THERMAL),
)
# per-XCC accumulator -> reason its graphics clock was below the host limit
XCC_RESIDENCY: tuple[tuple[str, str], ...] = (
    ("xcp_stats.gfx_below_host_limit_ppt_acc", "power"),
    ("xcp_stats.gfx_below_host_limit_thm_acc", "thermal"),
    ("xcp_stats.gfx_low_utilization_acc", "low_utilization"),
    ("xcp_stats.gfx_below_host_limit_total_acc", "any"),
)
XCC_TOTAL_V17 = "xcp_stats.gfx_below_host_limit_acc"  # 1.7's one total: "any"

Series = tuple[str, Labels]  # (metric, labels)


@cache
def _labels(*pairs: tuple[str, str]) -> Labels:
    """The labels of one series, built once (every cycle reads the same few dozen)."""
    return labels_of(pairs)


def per_xcc(table: Mapping[str, Any], key: str) -> Iterator[tuple[int, int, float]]:
    """(xcp, xcc, value) of a `xcp_stats.*` list of lists, numeric entries only.

    Rows past the table's `num_partition` (when it gives one) are skipped.
    """
    rows = table.get(key)
    if not isinstance(rows, list):
        return
    partitions = number(table.get("num_partition"))
    for xcp, row in enumerate(rows):
        if partitions is not None and xcp >= partitions:
            return
        if not isinstance(row, list):
            continue
        for xcc, value in enumerate(row):
            found = number(value)
            if found is not None:
                yield xcp, xcc, found


def xcc_busy(table: Mapping[str, Any]) -> Iterator[Reading]:
    """Each XCC's graphics busy share, as a ratio."""
    for xcp, xcc, value in per_xcc(table, BUSY):
        ratio = percent(value)
        if ratio is not None:
            yield Reading(m.XCP_GFX_UTILIZATION, ratio, _labels(("xcp", str(xcp)),
                                                               ("xcc", str(xcc))))


def accumulators(table: Mapping[str, Any]) -> dict[Series, float]:
    """Every residency accumulator the table holds, by the series its ratio becomes."""
    found: dict[Series, float] = {}
    for key, reason in DEVICE_RESIDENCY:
        value = number(table.get(key))
        if value is not None:
            found[(m.THROTTLE_RESIDENCY, _labels(("reason", reason)))] = value
    keys = XCC_RESIDENCY if any(isinstance(table.get(k), list) for k, _ in XCC_RESIDENCY) \
        else ((XCC_TOTAL_V17, "any"),)
    for key, reason in keys:
        for xcp, xcc, value in per_xcc(table, key):
            labels = _labels(("xcp", str(xcp)), ("xcc", str(xcc)), ("reason", reason))
            found[(m.XCP_GFX_BELOW_HOST_LIMIT, labels)] = value
    return found


@dataclass
class Residency:
    """The accumulators of a GPU's previous metrics table, for ratios over the interval since."""

    ticks: float | None = None
    previous: dict[Series, float] = field(default_factory=dict)

    def readings(self, table: Mapping[str, Any]) -> list[Reading]:
        """Residency ratios between the previous table and this one (none the first time)."""
        ticks, current = number(table.get(TICKS)), accumulators(table)
        last_ticks, previous = self.ticks, self.previous
        self.ticks, self.previous = ticks, current
        if ticks is None or last_ticks is None or ticks <= last_ticks:
            return []  # no counter, first table, or the counter restarted (GPU reset)
        elapsed = ticks - last_ticks
        found = []
        for (metric, labels), value in current.items():
            before = previous.get((metric, labels))
            if before is not None and value >= before:
                found.append(Reading(metric, (value - before) / elapsed, labels))
        return found


def throttle_held(readings: list[Reading]) -> list[Reading]:
    """`throttle.active` per reason from this cycle's residency ratios: 1 when it held at all.

    amdsmi_get_violation_status applies the same rule to a 100 ms window it waits for on
    every call; these ratios span the whole interval between two cycles and cost no wait.
    """
    return [Reading(m.THROTTLE_ACTIVE, 1.0 if r.value > 0 else 0.0, r.labels)
            for r in readings if r.metric == m.THROTTLE_RESIDENCY]


def xcp_readings(table: Mapping[str, Any] | None, residency: Residency) -> list[Reading]:
    """This cycle's per-XCC busy and residency readings of a physical GPU's metrics table."""
    if table is None:
        return []
    return [*xcc_busy(table), *residency.readings(table)]
