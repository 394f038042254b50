"""The simulated pyhlml keeps the real binding's names, signatures, return shapes and errors.

The reference is habana-pyhlml 1.24.2.481 (pyhlml/main.py, hlml_error.py,
pyhlml_types_generated.py), read from the wheel on PyPI.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import sys
import warnings

import pytest

from ray_accel.exporter.backends.gaudi.status import HLML_RETURN
from ray_accel.exporter.simulate import STATE_ENV, SimulatedHardware
from ray_accel.exporter.simulate.gaudi_fake import FAKE_PYHLML_DIR, SCENARIO_ENV
from ray_accel.exporter.simulate.gaudi_scenario import PYHLML_FUNCTIONS

# function -> its parameters in pyhlml 1.24
REAL_SIGNATURES: dict[str, tuple[str, ...]] = {
    "hlmlInit": (),
    "hlmlInitWithFlags": ("flags",),
    "hlmlShutdown": (),
    "hlmlGetDriverVersion": (),
    "hlmlGetHLMLVersion": (),
    "hlmlGetNicDriverVersion": (),
    "hlmlDeviceGetCount": (),
    "hlmlDeviceGetHandleByIndex": ("index",),
    "hlmlDeviceGetHandleByUUID": ("uuid",),
    "hlmlDeviceGetHandleByPCIBusID": ("pci_addr",),
    "hlmlDeviceGetName": ("device",),
    "hlmlDeviceGetUUID": ("device",),
    "hlmlDeviceGetSerial": ("device",),
    "hlmlDeviceGetPCIInfo": ("device",),
    "hlmlDeviceGetModuleID": ("device",),
    "hlmlDeviceGetBoardID": ("device",),
    "hlmlDeviceGetMinorNumber": ("device",),
    "hlmlDeviceGetHLRevision": ("device",),
    "hlmlDeviceGetUtilizationRates": ("device",),
    "hlmlDeviceGetMemoryInfo": ("device",),
    "hlmlDeviceGetPowerUsage": ("device",),
    "hlmlDeviceGetPowerManagementLimit": ("device",),
    "hlmlDeviceGetPowerManagementDefaultLimit": ("device",),
    "hlmlDeviceGetTotalEnergyConsumption": ("device",),
    "hlmlDeviceGetTemperature": ("device", "sensor_type"),
    "hlmlDeviceGetClockInfo": ("device", "clock_type"),
    "hlmlDeviceGetMaxClockInfo": ("device", "clock_type"),
    "hlmlDeviceGetCurrentClocksThrottleReasons": ("device",),
    "hlmlDeviceGetPerformanceState": ("device",),
    "hlmlDeviceGetTotalECCErrors": ("device", "error_type", "counter_type"),
    "hlmlDeviceGetPCIEThroughput": ("device", "counter_type"),
    "hlmlDeviceGetPCIEReplayCounter": ("device",),
    "hlmlDeviceGetCurrPCIELinkGeneration": ("device",),
    "hlmlDeviceGetCurrPCIELinkWidth": ("device",),
    "hlmlDeviceGetReplacedRowsCount": ("device", "cause"),
    "hlmlDeviceGetReplacedRowsPendingStatus": ("device",),
    "hlmlDeviceGetMacAddrInfo": ("device",),
    "hlmlDeviceNicGetLink": ("device", "port"),
    "hlmlDeviceNicGetStatistics": ("device", "port", "num_of_counts"),
}

SCENARIO = {
    "name": "fake-pyhlml", "freeze_at_s": 5.0, "devices": [],
    "gaudi": {"devices": [{
        "name": "HL-225", "uuid": "01P0-HL2080A0-15-FAKE00-00-00-00", "serial": "SN0",
        "pci_bus_id": "0000:19:00.0", "module_id": 4, "utilization_percent": 50,
        "memory_utilization_percent": 20, "memory_total_bytes": 1000, "memory_used_bytes": 400,
        "power_mw": 1500, "temperatures_c": {"aip": 40}, "clocks_mhz": {"soc": 1800},
        "nic": {"ports": 66, "external": [65], "tx_bytes": 10, "rx_bytes": 20},
    }]},
}


@pytest.fixture
def pyhlml(tmp_path):
    saved = {name: os.environ.get(name) for name in (STATE_ENV, SCENARIO_ENV)}
    hardware = SimulatedHardware.start(SCENARIO, state_dir=tmp_path)
    hardware.activate()
    for name in [n for n in sys.modules if n == "pyhlml" or n.startswith("pyhlml.")]:
        del sys.modules[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import pyhlml
    assert any(issubclass(w.category, DeprecationWarning) and "hlml_types" in str(w.message)
               for w in caught), "the real pyhlml warns that hlml_types is deprecated"
    pyhlml.hlmlInit()
    yield pyhlml
    pyhlml.hlmlShutdown()
    hardware.close()
    sys.path.remove(str(FAKE_PYHLML_DIR))
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_every_simulated_function_has_the_real_signature(pyhlml):
    assert set(PYHLML_FUNCTIONS) == set(REAL_SIGNATURES)
    for name, params in REAL_SIGNATURES.items():
        assert tuple(inspect.signature(getattr(pyhlml, name)).parameters) == params, name
    assert pyhlml.SIMULATED and pyhlml.__file__.startswith(str(FAKE_PYHLML_DIR))


def test_return_shapes(pyhlml):
    handle = pyhlml.hlmlDeviceGetHandleByIndex(0)
    assert isinstance(handle, ctypes.c_void_p)
    uuid = "01P0-HL2080A0-15-FAKE00-00-00-00"
    assert pyhlml.hlmlDeviceGetHandleByUUID(uuid).value == handle.value
    assert pyhlml.hlmlDeviceGetHandleByPCIBusID("0000:19:00.0").value == handle.value
    assert pyhlml.hlmlDeviceGetName(handle) == b"HL-225"
    assert pyhlml.hlmlDeviceGetUUID(handle) == b"01P0-HL2080A0-15-FAKE00-00-00-00"
    assert isinstance(pyhlml.hlmlGetDriverVersion(), bytes)
    info = pyhlml.hlmlDeviceGetPCIInfo(handle)
    assert isinstance(info, ctypes.Structure)
    assert (info.bus_id, info.bus) == (b"0000:19:00.0", 0x19)
    assert [f[0] for f in type(info)._fields_] == [
        "bus", "bus_id", "device", "domain", "pci_device_id", "caps", "pci_rev", "pci_subsys_id"]
    rates = pyhlml.hlmlDeviceGetUtilizationRates(handle)
    assert [f[0] for f in type(rates)._fields_] == ["aip", "memory"]
    assert (rates.aip, rates.memory) == (50, 20)
    memory = pyhlml.hlmlDeviceGetMemoryInfo(handle)
    assert [f[0] for f in type(memory)._fields_] == ["free", "total", "used"]
    assert (memory.free, memory.total, memory.used) == (600, 1000, 400)
    assert pyhlml.hlmlDeviceGetModuleID(handle) == 4
    assert pyhlml.hlmlDeviceGetPowerUsage(handle) == 1500
    assert pyhlml.hlmlDeviceGetTemperature(handle, 0) == 40
    assert pyhlml.hlmlDeviceGetClockInfo(handle) == 1800  # clock_type defaults to SOC


def test_nic_ports_and_statistics(pyhlml):
    handle = pyhlml.hlmlDeviceGetHandleByIndex(0)
    (low, high), (ext_low, ext_high) = pyhlml.hlmlDeviceGetMacAddrInfo(handle)
    assert (low, high) == (2**64 - 1, 0b11) and (ext_low, ext_high) == (0, 0b10)
    assert pyhlml.hlmlDeviceNicGetLink(handle, 3) is True
    stats = pyhlml.hlmlDeviceNicGetStatistics(handle, 3)
    count = stats.num_of_counters_out[0]
    names = [n.decode() for n in stats.str_buf[0:256 * 32].split(b"\0") if n][:count]
    assert names[:2] == ["rx_Octets", "tx_Octets"]
    assert (stats.val_buf[0], stats.val_buf[1]) == (20, 10)


def test_errors_carry_hlml_codes_and_per_code_classes(pyhlml):
    handle = pyhlml.hlmlDeviceGetHandleByIndex(0)
    with pytest.raises(pyhlml.HLMLError) as raised:
        pyhlml.hlmlDeviceGetTotalEnergyConsumption(handle)  # not in the scenario
    assert raised.value.value == HLML_RETURN["NOT_SUPPORTED"]
    assert type(raised.value).__name__ == "HLMLError_NotSupported"
    with pytest.raises(pyhlml.HLMLError) as raised:
        pyhlml.hlmlDeviceGetHandleByIndex(7)
    assert raised.value.value == HLML_RETURN["INVALID_ARGUMENT"]
    from pyhlml import hlml_error

    assert {name.removeprefix("HLML_ERROR_") for name in dir(pyhlml.hlml_t.HLML_RETURN)
            if name.startswith("HLML_ERROR_")} == set(HLML_RETURN)
    assert hlml_error.HLMLError_AipIsLost().value == HLML_RETURN["AIP_IS_LOST"]
    pyhlml.hlmlShutdown()
    with pytest.raises(pyhlml.HLMLError) as raised:
        pyhlml.hlmlDeviceGetCount()
    assert raised.value.value == HLML_RETURN["UNINITIALIZED"]
    pyhlml.hlmlInit()
