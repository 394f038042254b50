"""The simulated amdsmi module: the real API's names, shapes and errors, and AMD scenarios."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

import pynvml
import pytest
from amd_support import GIB, amd_scenario, amdsmi_modules, bus, simulation, uuid

from ray_accel.exporter.simulate import FAKE_AMDSMI_DIR, ScenarioError, load_scenario
from ray_accel.exporter.simulate.amd_scenario import AMDSMI_FUNCTIONS
from ray_accel.exporter.simulate.nvml_state import render_state


@pytest.fixture
def amdsmi(tmp_path):
    """The simulated amdsmi module on a scenario, initialised: `amdsmi(source)`."""
    with simulation(tmp_path) as start, amdsmi_modules(start) as run:
        yield run


def test_module_has_every_simulated_function(amdsmi):
    module, _ = amdsmi(amd_scenario())
    assert module.SIMULATED
    assert module.__file__.startswith(str(FAKE_AMDSMI_DIR))
    assert [name for name in AMDSMI_FUNCTIONS if not callable(getattr(module, name, None))] == []


def test_return_shapes_match_the_real_api(amdsmi):
    module, _ = amdsmi(amd_scenario(devices=2))
    handles = module.amdsmi_get_processor_handles()
    assert len(handles) == 2 and all(isinstance(h, ctypes.c_void_p) for h in handles)
    h = handles[0]
    assert module.amdsmi_get_gpu_device_uuid(h) == uuid(0)
    assert module.amdsmi_get_gpu_device_bdf(h) == bus(0)
    assert module.amdsmi_get_gpu_activity(h) == {
        "gfx_activity": 55, "umc_activity": 31, "mm_activity": 7}
    assert module.amdsmi_get_gpu_vram_usage(h) == {"vram_total": 196592, "vram_used": 40960}
    power = module.amdsmi_get_power_info(h)
    assert set(power) == {"socket_power", "current_socket_power", "average_socket_power",
                          "gfx_voltage", "soc_voltage", "mem_voltage", "power_limit"}
    assert power["socket_power"] == 350 and power["average_socket_power"] == "N/A"
    assert module.amdsmi_get_power_cap_info(h)["power_cap"] == 750_000_000  # uW
    energy = module.amdsmi_get_energy_count(h)
    assert set(energy) == {"energy_accumulator", "counter_resolution", "timestamp"}
    assert energy["counter_resolution"] == pytest.approx(15.259, rel=1e-6)
    assert module.amdsmi_get_temp_metric(h, module.AmdSmiTemperatureType.HOTSPOT,
                                         module.AmdSmiTemperatureMetric.CURRENT) == 61
    assert set(module.amdsmi_get_clock_info(h, module.AmdSmiClkType.GFX)) == {
        "clk", "min_clk", "max_clk", "clk_locked", "clk_deep_sleep"}
    assert module.amdsmi_get_gpu_total_ecc_count(h) == {
        "correctable_count": 12, "uncorrectable_count": 1, "deferred_count": 2}
    pcie = module.amdsmi_get_pcie_info(h)
    assert pcie["pcie_metric"]["pcie_speed"] == 16000  # MT/s: Gen4
    assert pcie["pcie_static"]["max_pcie_speed"] == 32000
    links = module.amdsmi_get_link_metrics(h)
    assert links["num_links"] == 1 and len(links["links"]) == 8
    assert set(links["links"][0]) == {"bdf", "bit_rate", "max_bandwidth", "link_type", "read",
                                      "write"}
    assert links["links"][0]["bdf"] == bus(1)
    status = module.amdsmi_get_violation_status(h)
    assert status["active_ppt_pwr"] is True and status["per_ppt_pwr"] == 100
    assert status["active_hbm_thrm"] == "N/A"
    assert module.amdsmi_topo_get_link_type(h, handles[1]) == {"hops": 1, "type": 2}
    assert module.amdsmi_get_link_topology_nearest(
        h, module.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI) == {"processor_list": [handles[1].value]}
    assert module.amdsmi_get_gpu_compute_partition(h) == "SPX"
    assert module.amdsmi_get_gpu_kfd_info(h)["current_partition_id"] == 0
    metrics = module.amdsmi_get_gpu_metrics_info(h)
    assert len(metrics) == 79  # every key of amdsmi 7.0's table
    assert metrics["xgmi_read_data_acc"][1:] == ["N/A"] * 7


def test_process_list_shape(amdsmi):
    doc = amd_scenario(devices=1)
    doc["devices"][0]["processes"] = [{"pid": 77, "name": "python3", "used_memory_bytes": GIB,
                                       "gtt_bytes": 10, "cpu_bytes": 1, "gfx_percent": 50}]
    module, _ = amdsmi(doc)
    (process,) = module.amdsmi_get_gpu_process_list(module.amdsmi_get_processor_handles()[0])
    assert process == {
        "name": "python3", "pid": 77, "mem": GIB + 11,
        "engine_usage": {"gfx": 5_000_000_000, "enc": 0},  # 50 % of the 10 frozen seconds
        "memory_usage": {"gtt_mem": 10, "cpu_mem": 1, "vram_mem": GIB},
        "cu_occupancy": "N/A",
    }


def test_errors_are_the_real_exceptions(amdsmi):
    module, _ = amdsmi(amd_scenario(devices=1, errors=[
        {"function": "amdsmi_get_gpu_activity", "code": "NO_PERM"}]))
    h = module.amdsmi_get_processor_handles()[0]
    with pytest.raises(module.AmdSmiLibraryException) as raised:
        module.amdsmi_get_gpu_activity(h)
    assert raised.value.get_error_code() == 10
    assert "AMDSMI_STATUS_NO_PERM" in raised.value.get_error_info()
    with pytest.raises(module.AmdSmiLibraryException) as raised:
        module.amdsmi_get_temp_metric(h, module.AmdSmiTemperatureType.EDGE,
                                      module.AmdSmiTemperatureMetric.CURRENT)
    assert raised.value.err_code == 2  # NOT_SUPPORTED: no edge sensor in the scenario
    with pytest.raises(module.AmdSmiParameterException):
        module.amdsmi_get_gpu_activity(0)
    with pytest.raises(module.AmdSmiParameterException):
        module.amdsmi_get_clock_info(h, 0)
    with pytest.raises(module.AmdSmiLibraryException) as raised:
        module.amdsmi_get_gpu_activity(module.amdsmi_wrapper.amdsmi_processor_handle(99 << 8))
    assert raised.value.err_code == 1  # INVAL
    module.amdsmi_shut_down()
    with pytest.raises(module.AmdSmiLibraryException) as raised:
        module.amdsmi_get_processor_handles()
    assert raised.value.err_code == 32  # NOT_INIT
    module.amdsmi_init()


def test_secondary_partitions_answer_partition_queries_only(amdsmi):
    doc = amd_scenario(devices=1)
    doc["devices"][0].update({"compute_partition": "DPX", "partitions": [
        {"uuid": "01ff74a1-0000-1000-8000-0000000000f1", "vram_total_mb": 1000}]})
    module, _ = amdsmi(doc)
    first, second = module.amdsmi_get_processor_handles()
    assert module.amdsmi_get_gpu_kfd_info(second)["current_partition_id"] == 1
    assert module.amdsmi_get_gpu_device_bdf(second) == module.amdsmi_get_gpu_device_bdf(first)
    assert module.amdsmi_get_gpu_vram_usage(second)["vram_total"] == 1000
    with pytest.raises(module.AmdSmiLibraryException):
        module.amdsmi_get_power_info(second)


def test_scenario_updates_reach_the_module(amdsmi):
    module, hardware = amdsmi(amd_scenario(devices=1))
    h = module.amdsmi_get_processor_handles()[0]
    assert module.amdsmi_get_gpu_activity(h)["gfx_activity"] == 55
    hardware.modify(lambda s: s["devices"][0].update(gfx_activity_percent=12))
    deadline = time.monotonic() + 5
    while module.amdsmi_get_gpu_activity(h)["gfx_activity"] != 12:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_nvml_does_not_list_amd_devices(tmp_path):
    with simulation(tmp_path) as start:
        start("mixed")
        pynvml.nvmlInit()
        try:
            assert pynvml.nvmlDeviceGetCount() == 2
            names = {pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(2)}
            assert names == {"NVIDIA L4"}
        finally:
            pynvml.nvmlShutdown()


def test_a_node_with_only_amd_gpus_has_no_nvidia_driver(tmp_path):
    with simulation(tmp_path) as start:
        start("mi300x-8")
        with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
            pynvml.nvmlInit()


def test_rules_are_renumbered_for_nvml():
    doc = load_scenario("mixed")
    doc["errors"] = [{"function": "nvmlDeviceGetPowerUsage", "device": 1, "code": "UNKNOWN"},
                     {"function": "amdsmi_get_power_info", "device": 3, "code": "NO_PERM"}]
    state = render_state(load_scenario(doc), 0.0)
    assert "errors 1\nerror nvmlDeviceGetPowerUsage 1 999 0 inf\n" in state
    assert "amdsmi" not in state and state.count("\ndevice ") == 2


@pytest.mark.parametrize(("change", "message"), [
    ({"vendor": "intel"}, r'devices\[0\].vendor: expected "nvidia" or "amd"'),
    ({"vram_total_mb": "lots"}, r"devices\[0\].vram_total_mb: expected an integer"),
    ({"gfx_activity_percent": 120}, r"devices\[0\].gfx_activity_percent: must be <= 100"),
    ({"uuid": "GPU-1"}, r"devices\[0\].uuid: expected a UUID"),
    ({"compute_partition": "HEX"}, r"devices\[0\].compute_partition: expected a compute"),
    ({"throttle_percent": {"fan": 1}}, r"devices\[0\].throttle_percent.fan: unknown key"),
    ({"xgmi_links": [{"read_kb": 1}]}, r"xgmi_links\[0\].remote_pci_bus_id: required"),
    ({"memory_total_bytes": 1}, r"devices\[0\].memory_total_bytes: unknown key"),
])
def test_invalid_amd_devices_are_clear_errors(change, message):
    doc = amd_scenario(devices=1)
    doc["devices"][0].update(change)
    with pytest.raises(ScenarioError, match=message):
        load_scenario(doc)


@pytest.mark.parametrize(("rule", "message"), [
    ({"function": "amdsmi_get_nothing", "code": "NOT_SUPPORTED"}, "unknown amdsmi function"),
    ({"function": "amdsmi_get_power_info", "code": "GPU_IS_LOST"}, "unknown amdsmi status"),
    ({"function": "nvmlDeviceGetPowerUsage", "device": 0, "code": "UNKNOWN"},
     "device 0 is an amd device"),
])
def test_invalid_amd_rules_are_clear_errors(rule, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario(amd_scenario(devices=1, errors=[rule]))


def test_child_processes_import_the_fake(tmp_path):
    with simulation(tmp_path) as start:
        hardware = start(amd_scenario(devices=2))
        code = ("import amdsmi; amdsmi.amdsmi_init(); "
                "print(len(amdsmi.amdsmi_get_processor_handles()), amdsmi.SIMULATED)")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env={**os.environ, **hardware.environ()}, timeout=60, check=True)
        assert result.stdout.split() == ["2", "True"]
