"""What one sampling cycle reads from a Gaudi, one probe per concern.

Each probe asks pyhlml through `DeviceCalls` (which scopes failures) and turns
the answer into catalog readings in base units. HLML reports utilization in
percent, memory in bytes, power and its limit in mW, energy in mJ since the
driver was loaded, clocks in MHz, temperatures in Celsius and PCIe throughput
in bytes/s (a 10 ms sample).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ... import catalog as m
from ...model import Reading
from ..calls import reading
from .calls import DeviceCalls, number

MHZ = 1_000_000
MILLI = 1e-3
# HLML_TEMPERATURE_SENSORS value -> sensor label (the AIP is the chip: NVIDIA's "gpu")
TEMPERATURE_SENSORS: tuple[tuple[str, int], ...] = (
    ("gpu", 0), ("board", 1), ("memory", 3), ("vrm", 4))
# HLML_CLOCK_TYPE value -> clock label; Gaudi's clock domains have no NVIDIA counterpart
CLOCK_DOMAINS: tuple[tuple[str, int], ...] = (("soc", 0), ("ic", 1), ("mme", 2), ("tpc", 3))
# HLML_CLOCKS_THROTTLE_REASON_* bit -> reason label, NVIDIA's names for the same causes
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (1 << 0, m.REASON_SW_POWER_CAP), (1 << 1, m.REASON_SW_THERMAL_SLOWDOWN))
ECC_TYPES: tuple[tuple[str, int], ...] = ((m.ECC_CORRECTED, 0), (m.ECC_UNCORRECTED, 1))
VOLATILE_ECC = 0  # HLML_VOLATILE_ECC: since the driver was loaded, as on NVIDIA
# HLML_ROW_REPLACEMENT_CAUSE value -> cause label (NVIDIA's remapped-rows causes)
ROW_CAUSES: tuple[tuple[str, int], ...] = (("correctable", 0), ("uncorrectable", 1))
PCIE_DIRECTIONS: tuple[tuple[str, int], ...] = ((m.TRANSMIT, 0), (m.RECEIVE, 1))

Probe = Callable[[DeviceCalls, Any], Iterable[Reading]]


def _percent(value: Any) -> float | None:
    """A percent as a ratio; one that cannot be true too, for the reading checks to refuse."""
    found = number(value)
    return None if found is None else found / 100


def utilization(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    rates = hlml.call("hlmlDeviceGetUtilizationRates", handle)
    if rates is None:
        return
    busy = _percent(getattr(rates, "aip", None))
    if busy is not None:
        yield reading(m.GPU_UTILIZATION, busy, task=m.TASK_GENERAL)
    memory = _percent(getattr(rates, "memory", None))
    if memory is not None:
        yield reading(m.MEMORY_BANDWIDTH_UTILIZATION, memory)


def memory(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    info = hlml.call("hlmlDeviceGetMemoryInfo", handle)
    if info is None:
        return
    used, total = number(getattr(info, "used", None)), number(getattr(info, "total", None))
    if used is not None:
        yield reading(m.MEMORY_USAGE, used)
    if total:
        yield reading(m.MEMORY_LIMIT, total)


def power(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    milliwatts = number(hlml.call("hlmlDeviceGetPowerUsage", handle))
    if milliwatts is not None:
        yield reading(m.POWER, milliwatts * MILLI)
    limit = number(hlml.call("hlmlDeviceGetPowerManagementLimit", handle))
    if not limit:  # unset (0) or unsupported: the default limit is the one enforced
        limit = number(hlml.call("hlmlDeviceGetPowerManagementDefaultLimit", handle))
    if limit:
        yield reading(m.POWER_LIMIT, limit * MILLI)
    energy = number(hlml.call("hlmlDeviceGetTotalEnergyConsumption", handle))
    if energy is not None:
        yield reading(m.ENERGY, energy * MILLI)


def temperature(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    for sensor, sensor_type in TEMPERATURE_SENSORS:
        celsius = number(hlml.call("hlmlDeviceGetTemperature", handle, sensor_type, key=sensor))
        if celsius is not None:
            yield reading(m.TEMPERATURE, celsius, sensor=sensor)


def clocks(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    for domain, clock_type in CLOCK_DOMAINS:
        current = number(hlml.call("hlmlDeviceGetClockInfo", handle, clock_type, key=domain))
        if current is not None:
            yield reading(m.CLOCK_FREQUENCY, current * MHZ, clock=domain)
        highest = number(hlml.call("hlmlDeviceGetMaxClockInfo", handle, clock_type, key=domain))
        if highest is not None:
            yield reading(m.CLOCK_MAX_FREQUENCY, highest * MHZ, clock=domain)


def throttling(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    reasons = hlml.call("hlmlDeviceGetCurrentClocksThrottleReasons", handle)
    if isinstance(reasons, int) and not isinstance(reasons, bool):
        for bit, reason in THROTTLE_REASONS:
            yield reading(m.THROTTLE_ACTIVE, 1 if reasons & bit else 0, reason=reason)
    state = number(hlml.call("hlmlDeviceGetPerformanceState", handle))
    if state is not None and 0 <= state <= 15:
        yield reading(m.PERFORMANCE_STATE, state)


def errors(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    for error_type, memory_error in ECC_TYPES:
        count = number(hlml.call("hlmlDeviceGetTotalECCErrors", handle, memory_error,
                                 VOLATILE_ECC, key=error_type))
        if count is not None:
            yield reading(m.HW_ERRORS, count, error_type=error_type)
    replays = number(hlml.call("hlmlDeviceGetPCIEReplayCounter", handle))
    if replays is not None:
        yield reading(m.HW_ERRORS, replays, error_type=m.PCIE_REPLAY)


def rows(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    for cause, cause_type in ROW_CAUSES:
        count = number(hlml.call("hlmlDeviceGetReplacedRowsCount", handle, cause_type, key=cause))
        if count is not None:
            yield reading(m.REMAPPED_ROWS, count, cause=cause)
    pending = number(hlml.call("hlmlDeviceGetReplacedRowsPendingStatus", handle))
    if pending is not None:
        yield reading(m.ROW_REMAP_PENDING, 1 if pending else 0)


def pcie(hlml: DeviceCalls, handle: Any) -> Iterator[Reading]:
    generation = number(hlml.call("hlmlDeviceGetCurrPCIELinkGeneration", handle))
    if generation:
        yield reading(m.PCIE_GENERATION, generation, state=m.PCIE_CURRENT)
    width = number(hlml.call("hlmlDeviceGetCurrPCIELinkWidth", handle))
    if width:
        yield reading(m.PCIE_WIDTH, width, state=m.PCIE_CURRENT)
    for direction, counter in PCIE_DIRECTIONS:
        rate = number(hlml.call("hlmlDeviceGetPCIEThroughput", handle, counter, key=direction))
        if rate is not None:
            yield reading(m.GAUDI_PCIE_THROUGHPUT, rate, direction=direction)


PROBES: tuple[Probe, ...] = (utilization, memory, power, temperature, clocks, throttling,
                             errors, rows, pcie)
