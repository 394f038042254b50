"""A simulated ``amdsmi`` package: the real module's names, driven by a scenario.

`SimulatedHardware.activate()` puts the folder above this package first on
``sys.path`` (and `environ()` on PYTHONPATH for child processes), so that
``import amdsmi`` finds this instead of the PyPI wheel. A scenario can make
the import itself fail the ways the real wheel does (``amdsmi_import_error``):
KeyError without ROCm's libamd_smi.so, AttributeError when the wheel is newer
than the library, ImportError when the package is absent.
"""

from ._simulation import import_failure as _import_failure

_failure = _import_failure()
if _failure == "KeyError":
    # what amdsmi_wrapper prints, then fails with, when libamd_smi.so is not found
    print("Unable to find libamd_smi.so library try installing amd-smi-lib from your "
          "package manager")
    raise KeyError("libamd_smi.so")
if _failure == "AttributeError":
    raise AttributeError("/opt/rocm/lib/libamd_smi.so: undefined symbol: "
                         "amdsmi_get_gpu_enumeration_info")
if _failure == "ImportError":
    raise ModuleNotFoundError("No module named 'amdsmi'", name="amdsmi")

from . import amdsmi_wrapper  # noqa: E402
from .amdsmi_exception import (  # noqa: E402
    AmdSmiBdfFormatException,
    AmdSmiException,
    AmdSmiKeyException,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiRetryException,
    AmdSmiTimeoutException,
)
from .amdsmi_interface import (  # noqa: E402
    AmdSmiClkType,
    AmdSmiComputePartitionType,
    AmdSmiInitFlags,
    AmdSmiLinkType,
    AmdSmiMemoryPartitionType,
    AmdSmiProcessorType,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
    amdsmi_get_clock_info,
    amdsmi_get_energy_count,
    amdsmi_get_gpu_activity,
    amdsmi_get_gpu_asic_info,
    amdsmi_get_gpu_compute_partition,
    amdsmi_get_gpu_device_bdf,
    amdsmi_get_gpu_device_uuid,
    amdsmi_get_gpu_driver_info,
    amdsmi_get_gpu_kfd_info,
    amdsmi_get_gpu_memory_partition,
    amdsmi_get_gpu_metrics_info,
    amdsmi_get_gpu_process_list,
    amdsmi_get_gpu_total_ecc_count,
    amdsmi_get_gpu_vram_usage,
    amdsmi_get_gpu_xgmi_link_status,
    amdsmi_get_lib_version,
    amdsmi_get_link_metrics,
    amdsmi_get_link_topology_nearest,
    amdsmi_get_pcie_info,
    amdsmi_get_power_cap_info,
    amdsmi_get_power_info,
    amdsmi_get_processor_handle_from_bdf,
    amdsmi_get_processor_handles,
    amdsmi_get_processor_type,
    amdsmi_get_socket_handles,
    amdsmi_get_temp_metric,
    amdsmi_get_violation_status,
    amdsmi_init,
    amdsmi_is_P2P_accessible,
    amdsmi_shut_down,
    amdsmi_topo_get_link_type,
    amdsmi_topo_get_link_weight,
    amdsmi_topo_get_numa_node_number,
)

__version__ = "7.0.2"
SIMULATED = True  # not in the real package: lets tests tell the fake apart

__all__ = [
    "SIMULATED",
    "AmdSmiBdfFormatException",
    "AmdSmiClkType",
    "AmdSmiComputePartitionType",
    "AmdSmiException",
    "AmdSmiInitFlags",
    "AmdSmiKeyException",
    "AmdSmiLibraryException",
    "AmdSmiLinkType",
    "AmdSmiMemoryPartitionType",
    "AmdSmiParameterException",
    "AmdSmiProcessorType",
    "AmdSmiRetryException",
    "AmdSmiTemperatureMetric",
    "AmdSmiTemperatureType",
    "AmdSmiTimeoutException",
    "amdsmi_get_clock_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_gpu_activity",
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_compute_partition",
    "amdsmi_get_gpu_device_bdf",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_driver_info",
    "amdsmi_get_gpu_kfd_info",
    "amdsmi_get_gpu_memory_partition",
    "amdsmi_get_gpu_metrics_info",
    "amdsmi_get_gpu_process_list",
    "amdsmi_get_gpu_total_ecc_count",
    "amdsmi_get_gpu_vram_usage",
    "amdsmi_get_gpu_xgmi_link_status",
    "amdsmi_get_lib_version",
    "amdsmi_get_link_metrics",
    "amdsmi_get_link_topology_nearest",
    "amdsmi_get_pcie_info",
    "amdsmi_get_power_cap_info",
    "amdsmi_get_power_info",
    "amdsmi_get_processor_handle_from_bdf",
    "amdsmi_get_processor_handles",
    "amdsmi_get_processor_type",
    "amdsmi_get_socket_handles",
    "amdsmi_get_temp_metric",
    "amdsmi_get_violation_status",
    "amdsmi_init",
    "amdsmi_is_P2P_accessible",
    "amdsmi_shut_down",
    "amdsmi_topo_get_link_type",
    "amdsmi_topo_get_link_weight",
    "amdsmi_topo_get_numa_node_number",
    "amdsmi_wrapper",
]
