"""GPM in scenarios: a device's (or MIG device's) `gpm` section, checked and written.

A `gpm` section maps a GPM metric, named as NVML names it (`NVML_GPM_METRIC_<NAME>`
in lower case, without the prefix), to a signal: percent 0-100 for the `_util`
metrics and `sm_occupancy`, MiB/s for the `_per_sec` ones. Per-link metrics map
link numbers (or "*", for nvlink metrics every NVLink of the device) to signals.
On a MIG device the section is its GPU instance's (`nvmlGpmMigSampleGet`).
`gpm_supported` defaults, in the library, to the architecture: Hopper and newer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import checks

# Metric name -> NVML_GPM_METRIC_* id (nvml.h).
GPM_METRICS: dict[str, int] = {
    "graphics_util": 1,
    "sm_util": 2,
    "sm_occupancy": 3,
    "integer_util": 4,
    "any_tensor_util": 5,
    "dfma_tensor_util": 6,
    "hmma_tensor_util": 7,
    "dmma_tensor_util": 8,
    "imma_tensor_util": 9,
    "dram_bw_util": 10,
    "fp64_util": 11,
    "fp32_util": 12,
    "fp16_util": 13,
    "pcie_tx_per_sec": 20,
    "pcie_rx_per_sec": 21,
    "nvlink_total_rx_per_sec": 60,
    "nvlink_total_tx_per_sec": 61,
    "c2c_total_tx_per_sec": 100,
    "c2c_total_rx_per_sec": 101,
    "c2c_data_tx_per_sec": 102,
    "c2c_data_rx_per_sec": 103,
}
NVLINK_LINKS = 36  # NVML_GPM_METRIC_NVLINK_L0..L35_*_PER_SEC
C2C_LINKS = 14  # NVML_GPM_METRIC_C2C_LINK0..13_*


def _nvlink_id(offset: int) -> Callable[[int], int]:
    """Links 0-17 from id 62, links 18-35 from id 212; rx then tx per link."""
    return lambda link: (62 + 2 * link if link < 18 else 212 + 2 * (link - 18)) + offset


def _c2c_id(offset: int) -> Callable[[int], int]:
    """Four ids per link from 104: total tx, total rx, data tx, data rx."""
    return lambda link: 104 + 4 * link + offset


# Per-link metric name -> (links there are, link -> NVML_GPM_METRIC_* id).
GPM_LINK_METRICS: dict[str, tuple[int, Callable[[int], int]]] = {
    "nvlink_rx_per_sec": (NVLINK_LINKS, _nvlink_id(0)),
    "nvlink_tx_per_sec": (NVLINK_LINKS, _nvlink_id(1)),
    "c2c_link_total_tx_per_sec": (C2C_LINKS, _c2c_id(0)),
    "c2c_link_total_rx_per_sec": (C2C_LINKS, _c2c_id(1)),
    "c2c_link_data_tx_per_sec": (C2C_LINKS, _c2c_id(2)),
    "c2c_link_data_rx_per_sec": (C2C_LINKS, _c2c_id(3)),
}
GPM_KEYS = (*GPM_METRICS, *GPM_LINK_METRICS)


def _is_percent(name: str) -> bool:
    return not name.endswith("_per_sec")


def _link_signals(name: str, value: Any, path: str, nvlinks: int) -> dict[int, Any]:
    """Link number -> signal of one per-link metric ("*" expanded over the device's NVLinks)."""
    count, _ = GPM_LINK_METRICS[name]
    by_link: dict[int, Any] = {}
    entries = checks.mapping(value, path)
    if "*" in entries:
        if not name.startswith("nvlink"):
            raise checks.fail(f"{path}.*", 'C2C links are given by number ("0", "1", ...)')
        by_link.update(dict.fromkeys(range(min(nvlinks, count)), entries["*"]))
    for link, signal in entries.items():
        if link == "*":
            continue
        if not link.isdigit() or int(link) >= count:
            raise checks.fail(f"{path}.{link}", f'expected a link number "0".."{count - 1}" or "*"')
        by_link[int(link)] = signal
    return by_link


def check_gpm(value: Any, path: str) -> None:
    """Checks a `gpm` section (see the module's doc)."""
    section = checks.mapping(value, path)
    checks.keys(section, path, GPM_KEYS)
    for name, entry in section.items():
        where = f"{path}.{name}"
        hi = 100 if _is_percent(name) else None
        if name in GPM_METRICS:
            checks.signal(entry, where, 0, hi)
            continue
        for link, signal in _link_signals(name, entry, where, GPM_LINK_METRICS[name][0]).items():
            checks.signal(signal, f"{where}.{link}", 0, hi)


def gpm_lines(device: Mapping[str, Any], signal_text: Callable[[Any], str]) -> list[str]:
    """State lines of a device's `gpm_supported` and `gpm` keys, one `gpm <id>` per signal."""
    lines = []
    if device.get("gpm_supported") is not None:
        lines.append(f"gpm_supported {int(bool(device['gpm_supported']))}")
    section = device.get("gpm") or {}
    nvlinks = len(device.get("nvlinks") or ())
    signals: dict[int, Any] = {}
    for name, entry in section.items():
        if name in GPM_METRICS:
            signals[GPM_METRICS[name]] = entry
            continue
        metric_id = GPM_LINK_METRICS[name][1]
        for link, signal in _link_signals(name, entry, name, nvlinks).items():
            signals[metric_id(link)] = signal
    lines += [f"gpm {metric_id} {signal_text(signals[metric_id])}" for metric_id in sorted(signals)]
    return lines


def zero_signals(device: dict[str, Any]) -> None:
    """Sets every GPM signal of a device to 0, keeping which metrics (and links) it offers.

    With `load_from_processes`, its live processes then add their share (see
    docs/simulation.md), as they do to the utilization rates.
    """
    section = device.get("gpm")
    if not section:
        return
    device["gpm"] = {name: dict.fromkeys(entry, 0) if name in GPM_LINK_METRICS else 0
                     for name, entry in section.items()}
