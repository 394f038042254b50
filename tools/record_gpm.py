"""Records every GPM call on each GPU (and MIG GPU instance), for tools/record_real_gpu.py.

Per physical GPU: `nvmlGpmQueryDeviceSupport`, then (where supported) two
samples 1 s apart through `nvmlGpmSampleGet` and every metric id 1 ..
NVML_GPM_METRIC_MAX - 1 between them through `nvmlGpmMetricsGet`, each with
its status, value and metricInfo; the same through `nvmlGpmMigSampleGet` for
each GPU instance when MIG is on. Each call's wall and CPU microseconds are
kept, so the simulated library's costs can be checked against a real GPU's.
Beside each GPU's samples, its PCIe byte counters (fields 197/198) are read
too (`pcie_counters_sample_1`/`_2`): their change over the same second, against
GPM's PCIe rates (metrics 20/21), says how closely the two count the same bytes,
which the agent's wrap counting relies on (docs/backends.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pynvml

INTERVAL_S = 1.0


def timed(call: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """call()'s answer (or None) and what it cost, with the NVML error if it raised."""
    wall, cpu = time.perf_counter(), time.thread_time()
    entry: dict[str, Any] = {}
    try:
        answer = call()
    except pynvml.NVMLError as error:
        answer = None
        entry = {"error": str(error), "code": error.value}
    entry["wall_us"] = round((time.perf_counter() - wall) * 1e6, 1)
    entry["cpu_us"] = round((time.thread_time() - cpu) * 1e6, 1)
    return answer, entry


def _text(value: bytes | None) -> str | None:
    return value.decode(errors="replace") if value is not None else None


class _Source:
    """One GPU or GPU instance: its two samples and what sampling it answered."""

    def __init__(self, handle: Any, gpu_instance: int | None) -> None:
        self.handle = handle
        self.gpu_instance = gpu_instance
        self.samples: list[Any] = []
        self.calls: dict[str, Any] = {}

    def take(self, name: str) -> None:
        sample, self.calls[f"alloc_{name}"] = timed(pynvml.nvmlGpmSampleAlloc)
        if sample is None:
            return
        if self.gpu_instance is None:
            taken, self.calls[name] = timed(lambda: pynvml.nvmlGpmSampleGet(self.handle, sample))
        else:
            taken, self.calls[name] = timed(lambda: pynvml.nvmlGpmMigSampleGet(
                self.handle, self.gpu_instance, sample))
        self.samples.append(sample if taken is not None else None)
        if self.gpu_instance is None:
            self.calls[f"pcie_counters_{name}"] = _pcie_counters(self.handle)

    def metrics(self) -> None:
        if len(self.samples) != 2 or None in self.samples:
            return
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = pynvml.NVML_GPM_METRIC_MAX - 1
        for slot in range(request.numMetrics):
            request.metrics[slot].metricId = slot + 1
        request.sample1, request.sample2 = self.samples
        answered, self.calls["metrics_get"] = timed(lambda: pynvml.nvmlGpmMetricsGet(request))
        if answered is None:
            return
        self.calls["metrics"] = {
            str(metric.metricId): {
                "return": metric.nvmlReturn, "value": metric.value,
                "short_name": _text(metric.metricInfo.shortName),
                "unit": _text(metric.metricInfo.unit),
            }
            for metric in (request.metrics[slot] for slot in range(request.numMetrics))
        }

    def free(self) -> None:
        for i, sample in enumerate(self.samples):
            if sample is not None:
                _, self.calls[f"free_{i}"] = timed(lambda s=sample: pynvml.nvmlGpmSampleFree(s))


def _pcie_counters(handle: Any) -> dict[str, Any]:
    """Fields 197/198 as the driver answers them (value type and raw value), and the cost."""
    answer, entry = timed(lambda: pynvml.nvmlDeviceGetFieldValues(
        handle, [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]))
    for value in answer or ():
        entry[str(value.fieldId)] = {"return": value.nvmlReturn, "type": value.valueType,
                                     "ull": value.value.ullVal}
    return entry


def _gpu_instances(handle: Any) -> list[int]:
    try:
        if pynvml.nvmlDeviceGetMigMode(handle)[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except pynvml.NVMLError:
        return []
    found = set()
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            found.add(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        except pynvml.NVMLError:
            continue
    return sorted(found)


def record_gpm() -> dict[str, Any]:
    """GPU index -> its GPM support, sampling and metrics (and each GPU instance's)."""
    document: dict[str, Any] = {}
    sources: list[_Source] = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        support, entry = timed(lambda h=handle: pynvml.nvmlGpmQueryDeviceSupport(h))
        if support is not None:
            entry["isSupportedDevice"] = support.isSupportedDevice
        gpu = _Source(handle, None)
        migs = {gi: _Source(handle, gi) for gi in _gpu_instances(handle)}
        document[str(index)] = {"support": entry, "device": gpu.calls,
                                "gpu_instances": {str(gi): s.calls for gi, s in migs.items()}}
        sources += [gpu, *migs.values()]
    for source in sources:
        source.take("sample_1")
    time.sleep(INTERVAL_S)
    for source in sources:
        source.take("sample_2")
        source.metrics()
        source.free()
    return document
