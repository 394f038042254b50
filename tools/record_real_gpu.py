"""Records what a real NVIDIA GPU answers to every NVML call the backend makes.

Run on a machine with a GPU (no Ray needed):

    python tools/record_real_gpu.py --out real-gpu.json

It writes one JSON document: the driver facts, each device's identity,
topology and one sample exactly as the agent sees them (values in base units,
absent ones listed under `errors`), plus the raw answers of the calls whose
shape the simulated library has to match (memory structs, field values,
encoder sampling period, NVLink version, fabric info, MIG index behaviour),
under `gpm` every GPM call with what it cost (tools/record_gpm.py), under
`call_costs` what the agent's costly calls cost when repeated
(tools/record_call_costs.py), and under `fabric_v3` each GPU's fabric info as
the agent reads it every cycle (v3 struct).
Comparing it with the same document taken on simulated hardware
(`--simulate hgx-h200`) shows where the fake differs from the real thing.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import pynvml

from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.backends.nvidia.fabric import (
    nvmlDeviceGetGpuFabricInfoV as fabric_info,
)
from ray_accel.exporter.model import NodeSnapshot
from ray_accel.exporter.sinks.json import snapshot_document
from ray_accel.exporter.topology import render


def _answer(fn: Any, *args: Any) -> Any:
    """A call's answer as JSON-ready data, or the NVML error it raised."""
    try:
        value = fn(*args)
    except pynvml.NVMLError as error:
        return {"error": str(error), "code": error.value}
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, ctypes.Structure):
        return {name: _plain(getattr(value, name)) for name, _ in value._fields_}
    if isinstance(value, ctypes.Array):
        return bytes(value).hex()
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int | float | str) or value is None:
        return value
    return repr(value)


def raw_calls(handle: Any) -> dict[str, Any]:
    """Answers whose exact shape the simulated library copies."""
    called = time.time()
    fields = pynvml.nvmlDeviceGetFieldValues(handle, [
        (pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0),
        (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 0),
        (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
        (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
    ])
    returned = time.time()
    fabric = pynvml.c_nvmlGpuFabricInfoV_t()
    return {
        "memory_v1": _answer(pynvml.nvmlDeviceGetMemoryInfo, handle),
        "memory_v2": _answer(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2),
        "encoder": _answer(pynvml.nvmlDeviceGetEncoderUtilization, handle),
        "nvlink_version_0": _answer(pynvml.nvmlDeviceGetNvLinkVersion, handle, 0),
        "nvlink_remote_type_0": _answer(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, 0),
        "fields": [{"id": f.fieldId, "scope": f.scopeId, "return": f.nvmlReturn,
                    "type": f.valueType, "ull": f.value.ullVal, "latency_us": f.latencyUsec}
                   for f in fields],
        # when NVML says it read each field, beside the call's own span (the agent times
        # the link counters by the first where it lies within the second)
        "field_times": {"called_s": called, "returned_s": returned,
                        "timestamps_us": [f.timestamp for f in fields]},
        "fabric": _answer(lambda: (pynvml.nvmlDeviceGetGpuFabricInfoV(
            handle, ctypes.byref(fabric)), fabric)[1]),
        "mig_mode": _answer(pynvml.nvmlDeviceGetMigMode, handle),
        "supported_events": _answer(pynvml.nvmlDeviceGetSupportedEventTypes, handle),
        "process_utilization": _answer(pynvml.nvmlDeviceGetProcessUtilization, handle, 0),
    }


def board_fact_calls(handle: Any) -> dict[str, Any]:
    """What nvidia-smi, DCGM and nvitop read besides the agent's calls (docs/simulation.md)."""
    policies = {name.removeprefix("NVML_PERF_POLICY_").lower(): getattr(pynvml, name)
                for name in dir(pynvml)
                if name.startswith("NVML_PERF_POLICY_") and name != "NVML_PERF_POLICY_COUNT"}
    error_counters = {name.removeprefix("NVML_NVLINK_ERROR_").lower(): getattr(pynvml, name)
                      for name in ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY",
                                   "NVML_NVLINK_ERROR_DL_CRC_FLIT", "NVML_NVLINK_ERROR_DL_CRC_DATA",
                                   "NVML_NVLINK_ERROR_DL_ECC_DATA")}
    calls: dict[str, Any] = {
        name: _answer(getattr(pynvml, f"nvmlDeviceGet{name}"), handle)
        for name in ("BAR1MemoryInfo", "NumFans", "FanSpeed", "PersistenceMode", "ComputeMode",
                     "DisplayMode", "DisplayActive", "DriverModel", "CudaComputeCapability",
                     "ConfComputeMemSizeInfo", "Brand", "BoardPartNumber", "VbiosVersion",
                     "PowerManagementLimitConstraints", "PowerManagementDefaultLimit",
                     "NumGpuCores", "MemoryBusWidth")
    }
    calls["TemperatureV"] = _answer(pynvml.nvmlDeviceGetTemperatureV, handle,
                                    pynvml.NVML_TEMPERATURE_GPU)
    calls["FanSpeed_v2[0]"] = _answer(pynvml.nvmlDeviceGetFanSpeed_v2, handle, 0)
    calls["NvLinkErrorCounter[0]"] = {
        name: _answer(pynvml.nvmlDeviceGetNvLinkErrorCounter, handle, 0, counter)
        for name, counter in error_counters.items()}
    calls["ViolationStatus"] = {name: _answer(pynvml.nvmlDeviceGetViolationStatus, handle, policy)
                                for name, policy in policies.items()}
    return calls


def _sibling(name: str) -> Any:
    """The module `name` of the tools folder, next to this file."""
    folder = str(Path(__file__).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def record() -> dict[str, Any]:
    backend = NvidiaBackend()
    devices = backend.open()
    samples = [backend.sample(device) for device in devices]
    time.sleep(1.0)  # a second sample: counters advance, rates can be read
    samples = [backend.sample(device) for device in devices]
    snapshot = NodeSnapshot(cycle=1, taken_at=time.time(), interval_s=1.0, node_labels={},
                            backends=(), devices=tuple(samples))
    raw, fabric = {}, {}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        raw[str(index)] = {**raw_calls(handle), "board": board_fact_calls(handle)}
        # v3, as the agent reads it every cycle (health mask and summary included)
        fabric[str(index)] = _answer(fabric_info, handle)
    document = {
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "facts": dict(backend.facts()),
        "topology": render(devices, legend=False),
        "snapshot": snapshot_document(snapshot),
        "raw": raw,
        # every GPM call on every GPU and GPU instance
        "gpm": _sibling("record_gpm").record_gpm(),
        # the costly calls, repeated on GPU 0
        "call_costs": _sibling("record_call_costs").record_call_costs(),
        "fabric_v3": fabric,
    }
    backend.close()
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--simulate", metavar="SCENARIO",
                        help="record simulated hardware instead, for comparison")
    args = parser.parse_args(argv)
    if args.simulate:
        from ray_accel.exporter.simulate import SimulatedHardware

        SimulatedHardware.start(args.simulate).activate()
    args.out.write_text(json.dumps(record(), indent=1, sort_keys=True))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
