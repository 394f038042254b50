"""Catalog readings of a Neuron device (chip) or NeuronCore from one report view.

neuron-monitor reports NeuronCore utilization and memory per Neuron
application (runtime) and core, and ECC counts per device. A chip's
utilization is the mean of its cores', its memory the sum of theirs; a core
no runtime uses is idle (0) when the groups answered, and its values are
absent when they did not. Utilization arrives in percent (here / 100),
memory in bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ... import catalog as m
from ...model import ProcessSample, Reading
from ..calls import reading
from .report import ReportView, Runtime, is_ratio

# neuron_hw_counters field -> hw.errors error_type (DRAM ECC keeps the shared names)
ECC_ERROR_TYPES = (("mem_ecc_corrected", m.ECC_CORRECTED),
                   ("mem_ecc_uncorrected", m.ECC_UNCORRECTED),
                   ("sram_ecc_corrected", "sram_ecc_corrected"),
                   ("sram_ecc_uncorrected", "sram_ecc_uncorrected"))


def chip_readings(view: ReportView, device: int, cores: Sequence[int],
                  memory_limit: float | None) -> Iterator[Reading]:
    """Utilization, memory and ECC counters of one Neuron device."""
    if view.utilization is not None and cores:
        busy = [view.utilization.get(core, 0.0) for core in cores]
        if all(map(is_ratio, busy)):  # else a core's refused value says why
            yield reading(m.GPU_UTILIZATION, sum(busy) / len(busy), task=m.TASK_GENERAL)
    if view.core_memory is not None:
        used = sum(sum(view.core_memory.get(core, {}).values()) for core in cores)
        yield reading(m.MEMORY_USAGE, used)
    if memory_limit is not None:
        yield reading(m.MEMORY_LIMIT, memory_limit)
    if view.ecc is not None and device in view.ecc:
        counts = view.ecc[device]
        for field, error_type in ECC_ERROR_TYPES:
            if field in counts:
                yield reading(m.HW_ERRORS, counts[field], error_type=error_type)


def core_readings(view: ReportView, core: int) -> Iterator[Reading]:
    """Utilization and memory (in total and by category) of one NeuronCore."""
    if view.utilization is not None:
        yield reading(m.GPU_UTILIZATION, view.utilization.get(core, 0.0), task=m.TASK_GENERAL)
    if view.core_memory is not None:
        categories = view.core_memory.get(core, {})
        yield reading(m.MEMORY_USAGE, sum(categories.values()))
        for category, used in sorted(categories.items()):
            yield reading(m.NEURON_CORE_MEMORY_USAGE, used, category=category)


def runtime_readings(runtime: Runtime) -> Iterator[Reading]:
    """What neuron-monitor says of a runtime as a whole (not per core)."""
    if runtime.host_memory_bytes is not None:
        yield reading(m.NEURON_RUNTIME_HOST_MEMORY, runtime.host_memory_bytes)
    for mode, ratio in sorted(runtime.vcpu.items()):
        yield reading(m.NEURON_RUNTIME_VCPU_UTILIZATION, ratio, mode=mode)
    for (stage, percentile), seconds in sorted(runtime.latency.items()):
        yield reading(m.NEURON_EXECUTION_LATENCY, seconds, stage=stage,
                      quantile=_quantile(percentile))
    for (kind, key), count in sorted(runtime.executions.items()):
        if kind == "error":
            yield reading(m.NEURON_EXECUTION_ERRORS, count, error_type=key)
        else:
            yield reading(m.NEURON_EXECUTIONS, count, outcome=key)


def _process(runtime: Runtime, cores: Sequence[int], with_runtime: bool) -> ProcessSample:
    readings = []
    mine = [core for core in cores if core in runtime.cores]
    held = [sum(runtime.core_memory[core].values()) for core in mine
            if core in runtime.core_memory]
    if held:
        readings.append(reading(m.PROCESS_MEMORY_USAGE, sum(held)))
    busy = [runtime.utilization[core] for core in mine if core in runtime.utilization]
    if busy and all(map(is_ratio, busy)):
        # the general compute engine: what attribution reads to tell idle from busy
        readings.append(reading(m.PROCESS_UTILIZATION, sum(busy) / len(busy), engine=m.ENGINE_SM))
    if with_runtime:
        readings.extend(runtime_readings(runtime))
    return ProcessSample(runtime.pid, tuple(readings))


def chip_processes(view: ReportView, cores: Sequence[int]) -> tuple[ProcessSample, ...]:
    """Runtimes on the device's cores; each runtime's own figures go on its first core's chip."""
    return tuple(_process(r, cores, with_runtime=r.cores[0] in cores)
                 for r in view.runtimes if r.cores and set(r.cores) & set(cores))


def core_processes(view: ReportView, core: int) -> tuple[ProcessSample, ...]:
    """Runtimes on one NeuronCore, with their memory and utilization there."""
    return tuple(_process(r, (core,), with_runtime=False) for r in view.runtimes
                 if core in r.cores)


def _quantile(percentile: str) -> str:
    """neuron-monitor's "p99" as Prometheus writes quantiles: "0.99"."""
    digits = percentile.removeprefix("p")
    return f"{int(digits) / 100:g}" if digits.isdigit() else percentile
