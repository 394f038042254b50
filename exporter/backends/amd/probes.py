"""What one sampling cycle reads from an AMD GPU, one probe per concern.

Each probe asks amdsmi through `DeviceCalls` (which scopes failures) and turns
the answer into catalog readings in base units. amdsmi reports VRAM in MB
(MiB), activity in percent, power in W, the power cap in uW, energy as an
accumulator times its resolution in uJ, and clocks in MHz. A value amdsmi
reports as "N/A", or a call that fails, yields nothing: the metric is absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ... import catalog as m
from ...model import Reading
from ..calls import reading
from ..pcie import GENERATIONS
from .calls import DeviceCalls, field, number

MIB = 1024 * 1024
MHZ = 1_000_000
MICRO = 1e-6
# amdsmi_violation_status_t member -> throttle reason label. PPT (package power
# tracking) is the power cap, NVIDIA's sw_power_cap; the thermal ones have no
# NVIDIA counterpart and keep AMD's names.
VIOLATIONS: tuple[tuple[str, str], ...] = (
    ("ppt_pwr", m.REASON_SW_POWER_CAP),
    ("socket_thrm", m.REASON_SOCKET_THERMAL),
    ("prochot_thrm", m.REASON_PROCHOT),
    ("vr_thrm", m.REASON_VR_THERMAL),
    ("hbm_thrm", m.REASON_HBM_THERMAL),
)
TEMPERATURE_SENSORS: tuple[tuple[str, str], ...] = (
    ("edge", "EDGE"), ("hotspot", "HOTSPOT"), ("memory", "VRAM"))
# clock label -> AmdSmiClkType member: GFX is the compute clock (NVIDIA's SM clock)
CLOCK_DOMAINS: tuple[tuple[str, str], ...] = ((m.CLOCK_SM, "GFX"), (m.CLOCK_MEMORY, "MEM"))


def percent(value: Any) -> float | None:
    """A 0-100 activity as a ratio; None for "N/A". A value out of range is passed on
    for the agent's reading checks to refuse and count (exporter/validation.py)."""
    found = number(value)
    return None if found is None else found / 100


Probe = Callable[[DeviceCalls, Any], Iterable[Reading]]


def activity(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    answer = amd.call("amdsmi_get_gpu_activity", handle) or {}
    for key, metric, labels in (
        ("gfx_activity", m.GPU_UTILIZATION, {"task": m.TASK_GENERAL}),
        ("umc_activity", m.MEMORY_BANDWIDTH_UTILIZATION, {}),
        ("mm_activity", m.GPU_UTILIZATION, {"task": "multimedia"}),
    ):
        ratio = percent(answer.get(key))
        if ratio is not None:
            yield reading(metric, ratio, **labels)


def memory(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    answer = amd.call("amdsmi_get_gpu_vram_usage", handle)
    used, total = field(answer, "vram_used"), field(answer, "vram_total")
    if used is not None:
        yield reading(m.MEMORY_USAGE, used * MIB)
    if total is not None:
        yield reading(m.MEMORY_LIMIT, total * MIB)


def power(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    # socket_power since amdsmi 6.4; current_ (MI300) or average_ (older) before
    watts = field(amd.call("amdsmi_get_power_info", handle),
                  "socket_power", "current_socket_power", "average_socket_power")
    if watts is not None:
        yield reading(m.POWER, watts)
    cap = field(amd.call("amdsmi_get_power_cap_info", handle), "power_cap")
    if cap is not None:
        yield reading(m.POWER_LIMIT, cap * MICRO)
    energy = amd.call("amdsmi_get_energy_count", handle)
    # the accumulator is "power" in amdsmi before 6.4
    count = field(energy, "energy_accumulator", "power")
    resolution = field(energy, "counter_resolution")
    if count is not None and resolution is not None:
        yield reading(m.ENERGY, count * resolution * MICRO)


def temperature(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    lib = amd.library
    for sensor, member in TEMPERATURE_SENSORS:
        celsius = number(amd.call("amdsmi_get_temp_metric", handle,
                                  lib.AmdSmiTemperatureType[member],
                                  lib.AmdSmiTemperatureMetric.CURRENT, key=sensor))
        if celsius is not None:
            yield reading(m.TEMPERATURE, celsius, sensor=sensor)


def clocks(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    lib = amd.library
    for domain, member in CLOCK_DOMAINS:
        info = amd.call("amdsmi_get_clock_info", handle, lib.AmdSmiClkType[member], key=domain)
        current, highest = field(info, "clk"), field(info, "max_clk")
        if current is not None:
            yield reading(m.CLOCK_FREQUENCY, current * MHZ, clock=domain)
        if highest is not None:
            yield reading(m.CLOCK_MAX_FREQUENCY, highest * MHZ, clock=domain)


def throttling(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    status = amd.call("amdsmi_get_violation_status", handle)
    if status is not None:
        for member, reason in VIOLATIONS:
            active = status.get(f"active_{member}")
            if isinstance(active, bool):
                yield reading(m.THROTTLE_ACTIVE, 1 if active else 0, reason=reason)
        return
    # before amdsmi 6.4 (no violation status) only the metrics table says "throttled"
    throttled = (amd.once("amdsmi_get_gpu_metrics_info", handle) or {}).get("throttle_status")
    if isinstance(throttled, bool):
        yield reading(m.THROTTLE_ACTIVE, 1 if throttled else 0, reason="any")


def errors(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    counts = amd.call("amdsmi_get_gpu_total_ecc_count", handle)
    for key, error_type in (("correctable_count", m.ECC_CORRECTED),
                            ("uncorrectable_count", m.ECC_UNCORRECTED),
                            ("deferred_count", m.ECC_DEFERRED)):
        count = field(counts, key)
        if count is not None:
            yield reading(m.HW_ERRORS, count, error_type=error_type)


def pcie(amd: DeviceCalls, handle: Any) -> Iterator[Reading]:
    info = amd.call("amdsmi_get_pcie_info", handle)
    if info is None:
        return
    static, metric = info.get("pcie_static") or {}, info.get("pcie_metric") or {}
    speed = number(metric.get("pcie_speed"))
    if speed is not None and int(speed) in GENERATIONS:
        yield reading(m.PCIE_GENERATION, GENERATIONS[int(speed)], state=m.PCIE_CURRENT)
    generation = number(static.get("pcie_interface_version"))
    if generation is not None:
        yield reading(m.PCIE_GENERATION, generation, state=m.PCIE_MAX)
    for width, state in ((metric.get("pcie_width"), "current"),
                         (static.get("max_pcie_width"), "max")):
        if number(width) is not None:
            yield reading(m.PCIE_WIDTH, width, state=state)
    replays = number(metric.get("pcie_replay_count"))
    if replays is not None:
        yield reading(m.HW_ERRORS, replays, error_type=m.PCIE_REPLAY)


# What every logical GPU answers (a secondary compute partition included) ...
PARTITION_PROBES: tuple[Probe, ...] = (activity, memory)
# ... and what only the physical GPU (the primary partition's handle) answers.
BOARD_PROBES: tuple[Probe, ...] = (power, temperature, clocks, throttling, errors, pcie)
