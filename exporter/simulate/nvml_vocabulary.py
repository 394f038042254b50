"""What the simulated NVML library speaks: limits, enumerations, error codes, exported functions.

Shared by the scenario checks (nvml_devices.py, scenario_rules.py) and the state
file writer (nvml_state.py); the numbers are NVML's own (nvml.h) and the limits
those of fake_nvml/fake_nvml.c.
"""

from __future__ import annotations

from typing import Any

from . import checks

# Limits shared with fake_nvml.c (MAX_DEVICES, MAX_MIG, CPU_WORDS * 64).
MAX_DEVICES = 64
MAX_MIG_DEVICES = 8
MAX_CPUS = 1024
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS
MAX_DELAY_S = 86400.0

# Buffer sizes of the NVML calls that return these strings, less the NUL.
MAX_NAME = 95
MAX_UUID = 95
MAX_SERIAL = 29
MAX_VERSION = 79
MAX_PART_NUMBER = 79  # NVML_DEVICE_PART_NUMBER_BUFFER_SIZE
MAX_VBIOS_VERSION = 31  # NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE

NVML_ERROR_CODES: dict[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "RESET_TYPE_NOT_SUPPORTED": 30,
    "UNKNOWN": 999,
}

ARCHITECTURES: dict[str, int] = {
    "kepler": 2,
    "maxwell": 3,
    "pascal": 4,
    "volta": 5,
    "turing": 6,
    "ampere": 7,
    "ada": 8,
    "hopper": 9,
    "blackwell": 10,
}
TOPOLOGY_LEVELS: dict[str, int] = {
    "INTERNAL": 0,
    "SINGLE": 10,
    "MULTIPLE": 20,
    "HOSTBRIDGE": 30,
    "NODE": 40,
    "SYSTEM": 50,
}
P2P_STATUSES: dict[str, int] = {
    "OK": 0,
    "CHIPSET_NOT_SUPPORTED": 1,
    "GPU_NOT_SUPPORTED": 2,
    "IOH_TOPOLOGY_NOT_SUPPORTED": 3,
    "DISABLED_BY_REGKEY": 4,
    "NOT_SUPPORTED": 5,
    "UNKNOWN": 6,
}
P2P_CAPS = ("read", "write", "nvlink", "atomics", "pci")  # nvmlGpuP2PCapsIndex_t order
FABRIC_STATES: dict[str, int] = {
    "NOT_SUPPORTED": 0,
    "NOT_STARTED": 1,
    "IN_PROGRESS": 2,
    "COMPLETED": 3,
}
NVLINK_REMOTE_TYPES: dict[str, int] = {"gpu": 0, "ibmnpu": 1, "switch": 2, "unknown": 255}
FIELD_VALUE_TYPES: dict[str, int] = {
    "double": 0,
    "uint": 1,
    "ulong": 2,
    "ull": 3,
    "sll": 4,
    "int": 5,
    "ushort": 6,
}
PROCESS_TYPES: dict[str, int] = {"compute": 1, "graphics": 2, "both": 3}
COMPUTE_MODES: dict[str, int] = {
    "DEFAULT": 0,
    "EXCLUSIVE_THREAD": 1,
    "PROHIBITED": 2,
    "EXCLUSIVE_PROCESS": 3,
}
DRIVER_MODELS: dict[str, int] = {"WDDM": 0, "WDM": 1, "MCDM": 2}  # Windows only
BRANDS: dict[str, int] = {
    "UNKNOWN": 0,
    "QUADRO": 1,
    "TESLA": 2,
    "NVS": 3,
    "GRID": 4,
    "GEFORCE": 5,
    "TITAN": 6,
    "NVIDIA_VAPPS": 7,
    "NVIDIA_VPC": 8,
    "NVIDIA_VCS": 9,
    "NVIDIA_VWS": 10,
    "NVIDIA_CLOUD_GAMING": 11,
    "QUADRO_RTX": 12,
    "NVIDIA_RTX": 13,
    "NVIDIA": 14,
    "GEFORCE_RTX": 15,
    "TITAN_RTX": 16,
}
# What nvmlDeviceGetCudaComputeCapability answers where a scenario gives only the
# architecture: the first compute capability of each (A100 8.0, H100/H200 9.0, B200 10.0).
COMPUTE_CAPABILITIES: dict[str, tuple[int, int]] = {
    "kepler": (3, 0),
    "maxwell": (5, 0),
    "pascal": (6, 0),
    "volta": (7, 0),
    "turing": (7, 5),
    "ampere": (8, 0),
    "ada": (8, 9),
    "hopper": (9, 0),
    "blackwell": (10, 0),
}

# Every symbol the C library exports (tests check this against the library).
NVML_FUNCTIONS: tuple[str, ...] = (
    "nvmlInit",
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPages_v2",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetProcessesUtilizationInfo",
    "nvmlEventSetCreate",
    "nvmlEventSetFree",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait",
    "nvmlEventSetWait_v2",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet",
    "nvmlGpmMetricsGet",
    # Board facts other monitoring tools read (nvidia-smi, DCGM, nvitop)
    "nvmlDeviceGetBAR1MemoryInfo",
    "nvmlDeviceGetNumFans",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetDriverModel",
    "nvmlDeviceGetDriverModel_v2",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetConfComputeMemSizeInfo",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetBoardPartNumber",
    "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetNumGpuCores",
    "nvmlDeviceGetMemoryBusWidth",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetViolationStatus",
)


def error_code(value: Any, path: str, allow_success: bool = False) -> int:
    """An NVML error code given by name ("NOT_SUPPORTED", "NVML_ERROR_GPU_IS_LOST") or number."""
    if isinstance(value, str):
        name = value.upper().removeprefix("NVML_ERROR_")
        if allow_success and name in ("SUCCESS", "NVML_SUCCESS"):
            return 0
        if name in NVML_ERROR_CODES:
            return NVML_ERROR_CODES[name]
        raise checks.fail(path, f"unknown NVML error {value!r} (e.g. NOT_SUPPORTED, GPU_IS_LOST)")
    return checks.integer(value, path, lo=0 if allow_success else 1, hi=2**31 - 1)
