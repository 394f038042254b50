"""pyhlml's legacy type module: deprecated since 1.2x (importing it warns), still what
``pyhlml.main`` imports as ``hlml_t``."""

import ctypes
import warnings

from . import pyhlml_types_generated as newpy

warnings.warn(
    "pyhlml.hlml_types is deprecated and will be removed in a future release. "
    "Please use pyhlml.pyhlml_types_generated directly.",
    DeprecationWarning,
    stacklevel=2,
)


class HLML_DEVICE:
    TYPE = ctypes.c_void_p


class HLML_DEFINE:
    PCI_ADDR_LEN = newpy.HLML_DEFINES.PCI_ADDR_LEN
    HL_FIELD_MAX_SIZE = newpy.HLML_DEFINES.HL_FIELD_MAX_SIZE
    PORTS_ARR_SIZE = newpy.HLML_DEFINES.PORTS_ARR_SIZE
    HLML_CLOCKS_THROTTLE_REASON_POWER = newpy.HLML_DEFINES.HLML_CLOCKS_THROTTLE_REASON_POWER
    HLML_CLOCKS_THROTTLE_REASON_THERMAL = newpy.HLML_DEFINES.HLML_CLOCKS_THROTTLE_REASON_THERMAL


class COMMON_DEFINE:
    VERSION_MAX_LEN = 128
    ETHER_ADDR_LEN = 6
    HABANA_LINK_CNT_MAX_NUM = 256
    STATUS_MAX_LEN = 30


class HLML_RETURN:
    TYPE = ctypes.c_uint


for _member in newpy.HLML_RETURN:
    setattr(HLML_RETURN, _member.name, _member.value)


class HLML_CLOCK_TYPE:
    TYPE = ctypes.c_uint
    HLML_CLOCK_SOC = newpy.HLML_CLOCK_TYPE.HLML_CLOCK_SOC
    HLML_CLOCK_IC = newpy.HLML_CLOCK_TYPE.HLML_CLOCK_IC
    HLML_CLOCK_MME = newpy.HLML_CLOCK_TYPE.HLML_CLOCK_MME
    HLML_CLOCK_TPC = newpy.HLML_CLOCK_TYPE.HLML_CLOCK_TPC


class HLML_TEMP_SENS:
    TYPE = ctypes.c_uint
    HLML_TEMPERATURE_ON_AIP = newpy.HLML_TEMPERATURE_SENSORS.HLML_TEMPERATURE_ON_AIP
    HLML_TEMPERATURE_ON_BOARD = newpy.HLML_TEMPERATURE_SENSORS.HLML_TEMPERATURE_ON_BOARD
    HLML_TEMPERATURE_OTHER = newpy.HLML_TEMPERATURE_SENSORS.HLML_TEMPERATURE_OTHER
    HLML_TEMPERATURE_HBM = newpy.HLML_TEMPERATURE_SENSORS.HLML_TEMPERATURE_HBM
    HLML_TEMPERATURE_VRM = newpy.HLML_TEMPERATURE_SENSORS.HLML_TEMPERATURE_VRM
    HLML_TEMPERATURE_CTEMP = newpy.HLML_TEMPERATURE_SENSORS.HLML_TEMPERATURE_CTEMP


class HLML_MEMORY_ERROR:
    TYPE = ctypes.c_uint
    HLML_MEMORY_ERROR_TYPE_CORRECTED = (
        newpy.HLML_MEMORY_ERROR_TYPE.HLML_MEMORY_ERROR_TYPE_CORRECTED)
    HLML_MEMORY_ERROR_TYPE_UNCORRECTED = (
        newpy.HLML_MEMORY_ERROR_TYPE.HLML_MEMORY_ERROR_TYPE_UNCORRECTED)


class HLML_ECC_COUNTER:
    TYPE = ctypes.c_uint
    HLML_VOLATILE_ECC = newpy.HLML_ECC_COUNTER_TYPE.HLML_VOLATILE_ECC
    HLML_AGGREGATE_ECC = newpy.HLML_ECC_COUNTER_TYPE.HLML_AGGREGATE_ECC


class HLML_PCIE_UTIL_COUNTER:
    TYPE = ctypes.c_uint
    HLML_PCIE_UTIL_TX_BYTES = newpy.HLML_PCIE_UTIL_COUNTER.HLML_PCIE_UTIL_TX_BYTES
    HLML_PCIE_UTIL_RX_BYTES = newpy.HLML_PCIE_UTIL_COUNTER.HLML_PCIE_UTIL_RX_BYTES


class HLML_ROW_REPLACEMENT_CAUSE:
    TYPE = ctypes.c_uint
    HLML_ROW_REPLACEMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = (
        newpy.HLML_ROW_REPLACEMENT_CAUSE.HLML_ROW_REPLACEMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    HLML_ROW_REPLACEMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = (
        newpy.HLML_ROW_REPLACEMENT_CAUSE.HLML_ROW_REPLACEMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)


c_hlml_pci_cap = newpy.c_hlml_pci_cap
c_hlml_pci_info = newpy.c_hlml_pci_info
c_hlml_utilization = newpy.c_hlml_utilization
c_hlml_memory = newpy.c_hlml_memory


class c_hlml_nic_stats_info(newpy.c_hlml_nic_stats_info):
    """NIC statistics of one port, with the buffers pyhlml allocates for the library to fill."""

    def __init__(self, port: int, num_of_counters: int | None = None) -> None:
        count = num_of_counters or COMMON_DEFINE.HABANA_LINK_CNT_MAX_NUM
        self.port = port
        self.str_buf = ctypes.cast(ctypes.create_string_buffer(count * 32),
                                   ctypes.POINTER(ctypes.c_char))
        self.val_buf = (ctypes.c_uint64 * (count * ctypes.sizeof(ctypes.c_uint64)))()
        self.num_of_counters_out = (ctypes.c_uint32 * 1)()
