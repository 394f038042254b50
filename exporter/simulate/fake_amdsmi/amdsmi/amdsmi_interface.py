"""The simulated amdsmi Python API: the real function names, arguments and return shapes.

Each function answers what ``amdsmi_interface.py`` of the real wheel (7.0.x)
returns: the same dict keys, the same units (VRAM in MB, power in W, power cap
in uW, energy as accumulator x resolution in uJ, clocks in MHz, XGMI data in
KB, engine time in ns) and "N/A" where the real one reports a value as not
available. A value the scenario does not define raises AmdSmiLibraryException
with AMDSMI_STATUS_NOT_SUPPORTED; a secondary compute partition answers only
partition-level queries (identity, VRAM, activity, processes), like the real one.

The real wheel has this one module; here it is the public face of one private
module per section (`_interface_devices`, `_interface_metrics`, `_interface_gpu_metrics`,
`_interface_links`, `_interface_processes`, with `_interface_types` for the enums and
limits), so that ``amdsmi.amdsmi_interface.X`` answers what the real one does.
"""

from __future__ import annotations

from ._interface_devices import (
    amdsmi_get_gpu_asic_info,
    amdsmi_get_gpu_compute_partition,
    amdsmi_get_gpu_device_bdf,
    amdsmi_get_gpu_device_uuid,
    amdsmi_get_gpu_driver_info,
    amdsmi_get_gpu_kfd_info,
    amdsmi_get_gpu_memory_partition,
    amdsmi_get_lib_version,
    amdsmi_get_processor_handle_from_bdf,
    amdsmi_get_processor_handles,
    amdsmi_get_processor_type,
    amdsmi_get_socket_handles,
    amdsmi_init,
    amdsmi_shut_down,
)
from ._interface_gpu_metrics import (
    amdsmi_get_gpu_metrics_info,
    amdsmi_get_violation_status,
)
from ._interface_links import (
    amdsmi_get_gpu_xgmi_link_status,
    amdsmi_get_link_metrics,
    amdsmi_get_link_topology_nearest,
    amdsmi_get_pcie_info,
    amdsmi_is_P2P_accessible,
    amdsmi_topo_get_link_type,
    amdsmi_topo_get_link_weight,
    amdsmi_topo_get_numa_node_number,
)
from ._interface_metrics import (
    amdsmi_get_clock_info,
    amdsmi_get_energy_count,
    amdsmi_get_gpu_activity,
    amdsmi_get_gpu_total_ecc_count,
    amdsmi_get_gpu_vram_usage,
    amdsmi_get_power_cap_info,
    amdsmi_get_power_info,
    amdsmi_get_temp_metric,
)
from ._interface_processes import (
    amdsmi_get_gpu_process_list,
)
from ._interface_types import (
    AMDSMI_MAX_NUM_JPEG_ENG_V1,
    AMDSMI_MAX_NUM_VCN,
    AMDSMI_MAX_NUM_XCC,
    AMDSMI_MAX_NUM_XCP,
    AMDSMI_MAX_NUM_XGMI_LINKS,
    MAX_NUM_PROCESSES,
    AmdSmiClkType,
    AmdSmiComputePartitionType,
    AmdSmiInitFlags,
    AmdSmiLinkType,
    AmdSmiMemoryPartitionType,
    AmdSmiProcessorType,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
    processor_handle,
)

__all__ = [
    "AMDSMI_MAX_NUM_JPEG_ENG_V1",
    "AMDSMI_MAX_NUM_VCN",
    "AMDSMI_MAX_NUM_XCC",
    "AMDSMI_MAX_NUM_XCP",
    "AMDSMI_MAX_NUM_XGMI_LINKS",
    "MAX_NUM_PROCESSES",
    "AmdSmiClkType",
    "AmdSmiComputePartitionType",
    "AmdSmiInitFlags",
    "AmdSmiLinkType",
    "AmdSmiMemoryPartitionType",
    "AmdSmiProcessorType",
    "AmdSmiTemperatureMetric",
    "AmdSmiTemperatureType",
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
    "processor_handle",
]
