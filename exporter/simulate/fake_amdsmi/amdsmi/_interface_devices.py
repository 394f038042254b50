"""Library, discovery and identity: init, handles, UUID, BDF, ASIC, driver, KFD and
partition modes."""

from __future__ import annotations

from ray_accel.exporter.simulate.checks import normalize_pci_bus_id

from . import amdsmi_wrapper
from ._interface_common import NA, amdsmi_bdf, required
from ._interface_types import AmdSmiInitFlags, AmdSmiProcessorType
from ._simulation import SIMULATION, library_error
from .amdsmi_exception import AmdSmiBdfFormatException, AmdSmiParameterException

_DEFAULT_LIB_VERSION = "25.5.1"


def _hex(value: int, width: int) -> str:
    return "0x" + format(value, "x").zfill(width)


def amdsmi_init(flag=AmdSmiInitFlags.INIT_AMD_GPUS):
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    SIMULATION.init()


def amdsmi_shut_down():
    SIMULATION.shut_down()


def amdsmi_get_lib_version():
    SIMULATION.enter("amdsmi_get_lib_version", device_call=False, check_init=False)
    version = SIMULATION.scenario.get("amdsmi_version") or _DEFAULT_LIB_VERSION
    major, minor, release = (int(part) for part in version.split("."))
    return {"major": major, "minor": minor, "release": release, "build": version}


def amdsmi_get_socket_handles():
    SIMULATION.enter("amdsmi_get_socket_handles", device_call=False)
    return [amdsmi_wrapper.amdsmi_socket_handle(target.handle)
            for target in SIMULATION.devices()]


def amdsmi_get_processor_handles():
    SIMULATION.enter("amdsmi_get_processor_handles", device_call=False)
    return [amdsmi_wrapper.amdsmi_processor_handle(value) for value in SIMULATION.handles()]


def amdsmi_get_processor_handle_from_bdf(bdf):
    SIMULATION.enter("amdsmi_get_processor_handle_from_bdf", device_call=False)
    try:
        bus_id = normalize_pci_bus_id(bdf, "bdf")
    except ValueError:
        raise AmdSmiBdfFormatException(bdf) from None
    for target in SIMULATION.devices():
        if str(target.device.get("pci_bus_id", "")).lower() == bus_id.lower():
            return amdsmi_wrapper.amdsmi_processor_handle(target.handle)
    raise library_error(amdsmi_wrapper.AMDSMI_STATUS_NOT_FOUND)


def amdsmi_get_processor_type(processor_handle):
    SIMULATION.enter("amdsmi_get_processor_type", processor_handle)
    return {"processor_type": AmdSmiProcessorType.AMDSMI_PROCESSOR_TYPE_AMD_GPU.name}


def amdsmi_get_gpu_device_uuid(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_device_uuid", processor_handle)
    uuid = required(target.partition or target.device, "uuid")
    return uuid


def amdsmi_get_gpu_device_bdf(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_device_bdf", processor_handle)
    bus_id = required(target.device, "pci_bus_id")
    return amdsmi_bdf(bus_id)


def amdsmi_get_gpu_asic_info(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_asic_info", processor_handle)
    device = target.device
    serial = device.get("serial") or NA
    if all(c in "0123456789abcdefABCDEF" for c in serial):  # hex, as the real one prints it
        serial = f"0x{int(serial, 16):016X}"
    device_id = device.get("device_id")
    cus = device.get("num_compute_units")
    return {
        "market_name": device.get("name") or NA,
        "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": "0x1002",
        "device_id": _hex(device_id, 4) if device_id is not None else NA,
        "rev_id": _hex(device.get("rev_id", 0), 2),
        "asic_serial": serial,
        "oam_id": device.get("oam_id", NA),
        "num_compute_units": NA if cus is None else cus // (1 + len(device.get("partitions")
                                                                   or ())),
        "target_graphics_version": device.get("target_graphics_version", NA),
        "subsystem_id": _hex(device_id, 4) if device_id is not None else NA,
    }


def amdsmi_get_gpu_driver_info(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_driver_info", processor_handle)
    return {"driver_name": "amdgpu",
            "driver_version": target.device.get("driver_version") or NA,
            "driver_date": "2015/01/01 00:00"}


def amdsmi_get_gpu_kfd_info(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_kfd_info", processor_handle)
    return {"kfd_id": 1000 + 100 * target.ordinal + target.partition_id,
            "node_id": 2 + 8 * target.ordinal + target.partition_id,
            "current_partition_id": target.partition_id}


def amdsmi_get_gpu_compute_partition(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_compute_partition", processor_handle)
    mode = required(target.device, "compute_partition")
    return mode.upper()


def amdsmi_get_gpu_memory_partition(processor_handle):
    target = SIMULATION.enter("amdsmi_get_gpu_memory_partition", processor_handle)
    mode = required(target.device, "memory_partition")
    return mode.upper()
