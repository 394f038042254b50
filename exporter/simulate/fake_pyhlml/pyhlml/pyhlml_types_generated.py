"""HLML's C types as pyhlml 1.24 declares them: return codes, enums, structures, defines.

Field names, types and enum values follow the real module of the same name;
the structures are plain ctypes structures, so the fake returns the very
objects the real binding does.
"""

import ctypes
from enum import IntEnum


class HLML_DEVICE_T:
    TYPE = ctypes.c_void_p


class HLML_RETURN(IntEnum):
    HLML_SUCCESS = 0
    HLML_ERROR_UNINITIALIZED = 1
    HLML_ERROR_INVALID_ARGUMENT = 2
    HLML_ERROR_NOT_SUPPORTED = 3
    HLML_ERROR_ALREADY_INITIALIZED = 5
    HLML_ERROR_NOT_FOUND = 6
    HLML_ERROR_INSUFFICIENT_SIZE = 7
    HLML_ERROR_DRIVER_NOT_LOADED = 9
    HLML_ERROR_TIMEOUT = 10
    HLML_ERROR_AIP_IS_LOST = 15
    HLML_ERROR_MEMORY = 20
    HLML_ERROR_NO_DATA = 21
    HLML_ERROR_UNKNOWN = 49


class HLML_CLOCK_TYPE(IntEnum):
    HLML_CLOCK_SOC = 0
    HLML_CLOCK_IC = 1
    HLML_CLOCK_MME = 2
    HLML_CLOCK_TPC = 3
    HLML_CLOCK_COUNT = 4


class HLML_TEMPERATURE_SENSORS(IntEnum):
    HLML_TEMPERATURE_ON_AIP = 0
    HLML_TEMPERATURE_ON_BOARD = 1
    HLML_TEMPERATURE_OTHER = 2
    HLML_TEMPERATURE_HBM = 3
    HLML_TEMPERATURE_VRM = 4
    HLML_TEMPERATURE_CTEMP = 5


class HLML_MEMORY_ERROR_TYPE(IntEnum):
    HLML_MEMORY_ERROR_TYPE_CORRECTED = 0
    HLML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    HLML_MEMORY_ERROR_TYPE_COUNT = 2


class HLML_ECC_COUNTER_TYPE(IntEnum):
    HLML_VOLATILE_ECC = 0
    HLML_AGGREGATE_ECC = 1
    HLML_ECC_COUNTER_TYPE_COUNT = 2


class HLML_PCIE_UTIL_COUNTER(IntEnum):
    HLML_PCIE_UTIL_TX_BYTES = 0
    HLML_PCIE_UTIL_RX_BYTES = 1
    HLML_PCIE_UTIL_COUNT = 2


class HLML_ROW_REPLACEMENT_CAUSE(IntEnum):
    HLML_ROW_REPLACEMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    HLML_ROW_REPLACEMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    HLML_ROW_REPLACEMENT_CAUSE_COUNT = 2


class HLML_P_STATES(IntEnum):
    HLML_PSTATE_0 = 0
    HLML_PSTATE_15 = 15
    HLML_PSTATE_SENTINEL = 16
    HLML_PSTATE_UNKNOWN = 32


class _PrintS(ctypes.Structure):
    """A structure that prints its fields, like pyhlml's."""

    def __str__(self) -> str:
        fields = ", ".join(f"{name}: {getattr(self, name)}" for name, *_ in self._fields_)
        return f"{type(self).__name__}({fields})"


class c_hlml_pci_cap(_PrintS):
    _fields_ = [("link_speed", ctypes.c_char * 10), ("link_width", ctypes.c_char * 10),
                ("link_max_speed", ctypes.c_char * 10), ("link_max_width", ctypes.c_char * 10)]


class c_hlml_pci_info(_PrintS):
    _fields_ = [("bus", ctypes.c_uint), ("bus_id", ctypes.c_char * 19),
                ("device", ctypes.c_uint), ("domain", ctypes.c_uint),
                ("pci_device_id", ctypes.c_uint), ("caps", c_hlml_pci_cap),
                ("pci_rev", ctypes.c_uint), ("pci_subsys_id", ctypes.c_uint)]


class c_hlml_utilization(_PrintS):
    _fields_ = [("aip", ctypes.c_uint), ("memory", ctypes.c_uint)]


class c_hlml_memory(_PrintS):
    _fields_ = [("free", ctypes.c_ulonglong), ("total", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class c_hlml_nic_stats_info(_PrintS):
    _fields_ = [("port", ctypes.c_uint32), ("str_buf", ctypes.POINTER(ctypes.c_char)),
                ("val_buf", ctypes.POINTER(ctypes.c_uint64)),
                ("num_of_counters_out", ctypes.POINTER(ctypes.c_uint32))]


class HLML_DEFINES:
    PCI_DOMAIN_LEN = 9
    PCI_ADDR_LEN = PCI_DOMAIN_LEN + 10
    PCI_LINK_INFO_LEN = 10
    HL_FIELD_MAX_SIZE = 32
    ETHER_ADDR_LEN = 6
    PORTS_ARR_SIZE = 2
    HLML_CLOCKS_THROTTLE_REASON_POWER = 1 << 0
    HLML_CLOCKS_THROTTLE_REASON_THERMAL = 1 << 1
