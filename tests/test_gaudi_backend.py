"""The Gaudi backend against the simulated pyhlml: values, scoped failures, Ray slots."""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import entry_points

import pytest
from simulated_worker import simulated_worker

from ray_accel.exporter import catalog as m
from ray_accel.exporter.attribution.join import allocations
from ray_accel.exporter.attribution.model import Grant, Holder, RayIdentity
from ray_accel.exporter.attribution.slots import assign_holders, slot_devices
from ray_accel.exporter.backends.base import BackendUnavailable, ErrorTally
from ray_accel.exporter.backends.gaudi import GaudiBackend
from ray_accel.exporter.backends.gaudi.nic import STATS_BUDGET_S
from ray_accel.exporter.rates import with_link_rates
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import STATE_ENV, ScenarioError, SimulatedHardware, load_scenario
from ray_accel.exporter.simulate.gaudi_fake import (
    FAKE_PYHLML_DIR,
    SCENARIO_ENV,
    activate_fake_pyhlml,
    driven_by_workloads,
)
from ray_accel.exporter.store import SnapshotStore
from ray_accel.exporter.validation import OUT_OF_RANGE, ReadingValidator

GIB = 2**30
MODULES = (3, 1, 0, 2)  # module ids of HLML indices 0..3: not the indices

CARD = {
    "name": "HL-225",
    "hl_revision": 2,
    "utilization_percent": 75,
    "memory_utilization_percent": 40,
    "memory_total_bytes": 96 * GIB,
    "memory_used_bytes": 30 * GIB,
    "power_mw": 450500,
    "power_limit_mw": 600000,
    "power_default_limit_mw": 600000,
    "energy_mj": 9_000_000,
    "temperatures_c": {"aip": 55, "board": 31, "hbm": 48},
    "clocks_mhz": {"soc": 1800},
    "max_clocks_mhz": {"soc": 1900},
    "throttle": {"power": 1, "thermal": 0},
    "performance_state": 2,
    "ecc_corrected": 7,
    "ecc_uncorrected": 1,
    "pcie_link": {"gen": 4, "width": 16},
    "pcie_tx_bytes_per_s": 2_000_000,
    "pcie_rx_bytes_per_s": 3_000_000,
    "pcie_replay": 5,
    "replaced_rows_sbe": 2,
    "replaced_rows_dbe": 1,
    "replaced_rows_pending": True,
    "nic": {"ports": 4, "external": [3], "down": [2], "tx_bytes": 5000, "rx_bytes": 6000},
}


def uuid(i: int) -> str:
    return f"01P0-HL2080A0-15-TEST{i:02d}-00-00-00"


def gaudi_scenario(devices: int = 4, **section) -> dict:
    """Identical cards whose module ids differ from their indices, frozen at t=10 s."""
    doc = {"name": "gaudi-test", "freeze_at_s": 10.0, "devices": [], "gaudi": {
        "device_defaults": copy.deepcopy(CARD),
        "devices": [{"uuid": uuid(i), "serial": f"SN{i}", "pci_bus_id": f"0000:{0x19 + i:02x}:00.0",
                     "module_id": MODULES[i]} for i in range(devices)]}}
    doc["gaudi"].update(section)
    return doc


def advance(hardware: SimulatedHardware, t: float) -> None:
    """Moves the frozen scenario time to t."""
    hardware.modify(lambda doc: doc.__setitem__("freeze_at_s", t))
    time.sleep(0.05)  # the fake looks at the scenario file at most every 10 ms


def values(sample, metric: str) -> dict[tuple, float]:
    return {r.labels: r.value for r in sample.readings if r.metric == metric}


@pytest.fixture
def simulated(tmp_path) -> Iterator:
    """`start(doc)`: simulated hardware activated in this process; all undone afterwards."""
    saved = {name: os.environ.get(name) for name in (STATE_ENV, SCENARIO_ENV)}
    started: list[SimulatedHardware] = []

    def start(doc) -> SimulatedHardware:
        hardware = SimulatedHardware.start(doc, state_dir=tmp_path / f"hw{len(started)}")
        hardware.activate()
        for name in [n for n in sys.modules if n == "pyhlml" or n.startswith("pyhlml.")]:
            del sys.modules[name]
        started.append(hardware)
        return hardware

    yield start
    for hardware in started:
        hardware.close()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if str(FAKE_PYHLML_DIR) in sys.path:
        sys.path.remove(str(FAKE_PYHLML_DIR))


@pytest.fixture
def open_gaudi(simulated) -> Iterator:
    """`open(doc)` -> (backend, devices, hardware); backends closed afterwards."""
    opened: list[GaudiBackend] = []

    def open_backend(doc):
        hardware = simulated(doc)
        backend = GaudiBackend()
        devices = list(backend.open())
        opened.append(backend)
        return backend, devices, hardware

    yield open_backend
    for backend in opened:
        backend.close()


def test_discovery_identity_and_facts(open_gaudi):
    backend, devices, _ = open_gaudi(gaudi_scenario())
    assert [d.index for d in devices] == ["0", "1", "2", "3"]
    assert [d.uuid for d in devices] == [uuid(i) for i in range(4)]
    assert {(d.vendor, d.model) for d in devices} == {("intel", "HL-225")}
    assert devices[1].pci_bus_id == "0000:1a:00.0"
    assert [d.facts["module_id"] for d in devices] == ["3", "1", "0", "2"]
    assert devices[2].facts["serial"] == "SN2" and devices[2].facts["hl_revision"] == "2"
    assert backend.facts()["driver_version"] == devices[0].facts["driver_version"]
    assert {"driver_version", "hlml_version", "nic_driver_version"} <= set(backend.facts())


def test_every_metric_in_base_units(open_gaudi):
    backend, devices, _ = open_gaudi(gaudi_scenario())
    sample = backend.sample(devices[0])
    assert sample.up and not sample.processes
    assert values(sample, m.GPU_UTILIZATION) == {(("task", "general"),): 0.75}
    assert values(sample, m.MEMORY_BANDWIDTH_UTILIZATION) == {(): 0.4}
    assert values(sample, m.MEMORY_USAGE) == {(): 30 * GIB}
    assert values(sample, m.MEMORY_LIMIT) == {(): 96 * GIB}
    assert values(sample, m.POWER) == {(): pytest.approx(450.5)}
    assert values(sample, m.POWER_LIMIT) == {(): 600.0}
    assert values(sample, m.ENERGY) == {(): 9000.0}
    assert values(sample, m.TEMPERATURE) == {
        (("sensor", "gpu"),): 55, (("sensor", "board"),): 31, (("sensor", "memory"),): 48}
    assert values(sample, m.CLOCK_FREQUENCY) == {(("clock", "soc"),): 1.8e9}
    assert values(sample, m.CLOCK_MAX_FREQUENCY) == {(("clock", "soc"),): 1.9e9}
    assert values(sample, m.THROTTLE_ACTIVE) == {
        (("reason", "sw_power_cap"),): 1, (("reason", "sw_thermal_slowdown"),): 0}
    assert values(sample, m.PERFORMANCE_STATE) == {(): 2}
    assert values(sample, m.HW_ERRORS) == {
        (("error_type", "ecc_corrected"),): 7, (("error_type", "ecc_uncorrected"),): 1,
        (("error_type", "pcie_replay"),): 5}
    assert values(sample, m.REMAPPED_ROWS) == {
        (("cause", "correctable"),): 2, (("cause", "uncorrectable"),): 1}
    assert values(sample, m.ROW_REMAP_PENDING) == {(): 1}
    assert values(sample, m.PCIE_GENERATION) == {(("state", "current"),): 4}
    assert values(sample, m.PCIE_WIDTH) == {(("state", "current"),): 16}
    assert values(sample, m.GAUDI_PCIE_THROUGHPUT) == {
        (("direction", "transmit"),): 2e6, (("direction", "receive"),): 3e6}


def test_roce_ports_are_links_with_state_and_byte_counters(open_gaudi):
    backend, devices, _ = open_gaudi(gaudi_scenario())
    for _ in range(4):  # fast calls: one cycle reads every port's counters, unless it stalled
        links = backend.sample(devices[0]).links
        if all(link.counters_at for link in links):
            break
    assert [(link.link_type, link.index) for link in links] == [("roce", p) for p in range(4)]
    assert [link.facts["remote_type"] for link in links] == ["gpu", "gpu", "gpu", "network"]
    for link in links:
        found = {(r.metric, r.labels): r.value for r in link.readings}
        assert found[(m.LINK_UP, ())] == (0 if link.index == 2 else 1)
        assert found[(m.LINK_IO, (("direction", "transmit"),))] == 5000
        assert found[(m.LINK_IO, (("direction", "receive"),))] == 6000


def test_slow_nic_counters_are_read_in_turn_within_a_budget(open_gaudi):
    """Statistics calls of 0.1 s, as on real cards: a cycle reads at most 3 of 8 ports."""
    doc = gaudi_scenario(devices=1)
    doc["freeze_at_s"] = None  # time runs: the counters grow 1 MB/s
    doc["gaudi"]["device_defaults"]["nic"] = {
        "ports": 8, "stats_latency_s": 0.1,
        "tx_bytes": {"start": 0, "rate_per_s": 1_000_000}, "rx_bytes": 0}
    backend, (device,), _ = open_gaudi(doc)
    most = int(STATS_BUDGET_S / 0.1) + 1
    previous, read_at, fresh_per_cycle = None, {}, []
    for _ in range(12):
        sample = with_link_rates(previous, backend.sample(device))
        assert len(sample.links) == 8
        assert all((m.LINK_UP, ()) in {(r.metric, r.labels) for r in link.readings}
                   for link in sample.links)  # every port's state, every cycle
        fresh = [link.index for link in sorted(sample.links, key=lambda k: k.counters_at or 0)
                 if link.counters_at is not None and link.counters_at != read_at.get(link.index)]
        fresh_per_cycle.append(fresh)
        read_at.update({link.index: link.counters_at for link in sample.links})
        for link in sample.links:
            if link.rates:  # between real readings: never a repeated value's zero
                assert link.rates["transmit"] == pytest.approx(1_000_000, rel=0.15)
                assert link.rates["receive"] == 0
        previous = sample
    assert all(1 <= len(fresh) <= most for fresh in fresh_per_cycle)
    order = [port for fresh in fresh_per_cycle for port in fresh]
    assert order == [i % 8 for i in range(len(order))]  # in turn, each from where the last stopped
    assert len(order) >= 12 and set(order) == set(range(8))
    assert all(link.rates for link in previous.links)


def test_values_follow_the_scenario_over_time(open_gaudi):
    doc = gaudi_scenario()
    doc["gaudi"]["device_defaults"]["energy_mj"] = {"start": 0, "rate_per_s": 500_000}
    doc["gaudi"]["device_defaults"]["utilization_percent"] = {
        "keyframes": [[0, 0], [40, 80]]}
    backend, devices, hardware = open_gaudi(doc)
    first = backend.sample(devices[0])
    assert values(first, m.ENERGY) == {(): 5000.0}  # 500 W for 10 s
    assert values(first, m.GPU_UTILIZATION) == {(("task", "general"),): 0.2}
    advance(hardware, 30.0)
    second = backend.sample(devices[0])
    assert values(second, m.ENERGY) == {(): 15000.0}
    assert values(second, m.GPU_UTILIZATION) == {(("task", "general"),): 0.6}


def test_unsupported_values_are_absent_not_zero_and_not_asked_again(open_gaudi):
    doc = gaudi_scenario(unsupported=["hlmlDeviceGetTotalEnergyConsumption"])
    del doc["gaudi"]["device_defaults"]["temperatures_c"]["hbm"]  # the fake answers NOT_SUPPORTED
    backend, devices, _ = open_gaudi(doc)
    sample = backend.sample(devices[0])
    assert m.ENERGY not in {r.metric for r in sample.readings}
    assert (("sensor", "memory"),) not in values(sample, m.TEMPERATURE)
    assert sample.errors["hlmlDeviceGetTotalEnergyConsumption"] == "not_supported"
    assert sample.errors["hlmlDeviceGetTemperature[memory]"] == "not_supported"
    backend.sample(devices[0])
    counts = backend.errors.snapshot()
    assert counts[("not_supported", "hlmlDeviceGetTotalEnergyConsumption")] == 1


def test_power_limit_falls_back_to_the_default_limit(open_gaudi):
    doc = gaudi_scenario(unsupported=["hlmlDeviceGetPowerManagementLimit"])
    doc["gaudi"]["device_defaults"]["power_default_limit_mw"] = 550000
    backend, devices, _ = open_gaudi(doc)
    assert values(backend.sample(devices[0]), m.POWER_LIMIT) == {(): 550.0}


def test_an_erroring_device_loses_only_that_value(open_gaudi):
    doc = gaudi_scenario(errors=[{"function": "hlmlDeviceGetPowerUsage", "device": 1,
                                  "code": "TIMEOUT"}])
    backend, devices, _ = open_gaudi(doc)
    failing, healthy = backend.sample(devices[1]), backend.sample(devices[0])
    assert failing.up and m.POWER not in {r.metric for r in failing.readings}
    assert failing.errors["hlmlDeviceGetPowerUsage"] == "timeout"
    assert "hlmlDeviceGetPowerUsage" not in healthy.errors
    assert m.MEMORY_USAGE in {r.metric for r in failing.readings}
    assert values(healthy, m.POWER) == {(): pytest.approx(450.5)}


def test_a_transient_error_costs_one_cycle_only(open_gaudi):
    doc = gaudi_scenario(errors=[{"function": "hlmlDeviceGetMemoryInfo", "code": "NO_DATA",
                                  "until_s": 15}])
    backend, devices, hardware = open_gaudi(doc)
    assert m.MEMORY_USAGE not in {r.metric for r in backend.sample(devices[0]).readings}
    advance(hardware, 20.0)
    assert values(backend.sample(devices[0]), m.MEMORY_USAGE) == {(): 30 * GIB}


def test_a_missing_libhlml_function_is_absent_for_good(open_gaudi):
    # pyhlml raises INVALID_ARGUMENT when libhlml lacks the symbol it asks for
    doc = gaudi_scenario(errors=[{"function": "hlmlDeviceGetReplacedRowsPendingStatus",
                                  "code": "INVALID_ARGUMENT"}])
    backend, devices, _ = open_gaudi(doc)
    backend.sample(devices[0])
    sample = backend.sample(devices[0])
    assert m.ROW_REMAP_PENDING not in {r.metric for r in sample.readings}
    assert sample.errors["hlmlDeviceGetReplacedRowsPendingStatus"] == "invalid_argument"


def test_a_lost_device_is_down_while_the_others_report(open_gaudi):
    backend, devices, hardware = open_gaudi(gaudi_scenario())
    hardware.modify(lambda s: s["gaudi"]["devices"][2].__setitem__("lost_at_s", 5.0))
    time.sleep(0.05)  # the fake looks at the scenario file at most every 10 ms
    lost = backend.sample(devices[2])
    assert not lost.up and not lost.readings and not lost.links
    assert set(lost.errors.values()) == {"aip_is_lost"}
    assert all(backend.sample(devices[i]).up for i in (0, 1, 3))


def test_a_device_lost_before_discovery_is_listed_down(open_gaudi):
    doc = gaudi_scenario()
    doc["gaudi"]["devices"][1]["lost_at_s"] = 0
    backend, devices, _ = open_gaudi(doc)
    assert len(devices) == 4 and devices[1].uuid == "gaudi-index-1"
    assert not backend.sample(devices[1]).up
    assert backend.sample(devices[0]).up


def test_a_card_hanging_at_discovery_hides_no_other(simulated):
    """HLML's first call on card 2 never returns: the sampler identifies each card on its own."""
    simulated(gaudi_scenario())
    import pyhlml

    release = threading.Event()
    real_uuid = pyhlml.hlmlDeviceGetUUID

    def uuid_of(handle):
        if handle.value == 3:  # card index 2
            release.wait(30)
        return real_uuid(handle)

    pyhlml.hlmlDeviceGetUUID = uuid_of
    sampler = Sampler([GaudiBackend()], SnapshotStore(), interval_s=0.5)
    try:
        first = sampler.run_cycle()
        by_index = {s.device.index: s for s in first.devices}
        assert sorted(i for i, s in by_index.items() if s.up) == ["0", "1", "3"]
        assert by_index["2"].stale and by_index["2"].device.uuid == "gaudi-index-2"
        release.set()
        time.sleep(0.1)
        sampler.run_cycle()
        joined = {s.device.index: s for s in sampler.run_cycle().devices}
        assert joined["2"].up and joined["2"].device.uuid == uuid(2)
    finally:
        release.set()
        sampler.stop()
        pyhlml.hlmlDeviceGetUUID = real_uuid


@pytest.mark.parametrize(("setting", "message"), [
    ({"import_error": "ImportError"}, "pip install habana-pyhlml"),
    ({"init_error": "UNINITIALIZED"}, "libhlml.so could not be loaded"),
    ({"init_error": "DRIVER_NOT_LOADED"}, "habanalabs driver is not loaded"),
])
def test_library_failures_make_the_backend_unavailable(simulated, capsys, setting, message):
    simulated(gaudi_scenario(**setting))
    with pytest.raises(BackendUnavailable, match=message):
        GaudiBackend().open()
    assert "Failed to load libhlml" not in capsys.readouterr().out  # folded into the message


def test_node_without_gaudi_devices(simulated):
    hardware = simulated({"name": "nvidia-only", "devices": []})
    with pytest.raises(BackendUnavailable, match="pyhlml package is not installed"):
        GaudiBackend().open()
    # pyhlml installed on a machine without libhlml.so
    os.environ[SCENARIO_ENV] = str(hardware.scenario_path)
    activate_fake_pyhlml()
    with pytest.raises(BackendUnavailable, match=r"libhlml\.so.*\[pyhlml printed: Failed"):
        GaudiBackend().open()
    simulated(gaudi_scenario(devices=0))
    with pytest.raises(BackendUnavailable, match="no Gaudi devices"):
        GaudiBackend().open()


def test_pyhlml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # import raises ImportError
    with pytest.raises(BackendUnavailable, match="pyhlml package is not installed"):
        GaudiBackend().open()


def test_hpu_slots_are_module_ids_not_indices(open_gaudi):
    _, devices, _ = open_gaudi(gaudi_scenario())
    by_module = {d.facts["module_id"]: d.uuid for d in devices}
    # raylet without HABANA_VISIBLE_MODULES: Ray's HPU ids 0..n-1 are module ids
    unset = slot_devices(devices, {"HABANA_VISIBLE_MODULES": None})
    assert unset == {("HPU", slot): by_module[str(slot)] for slot in range(4)}
    assert unset[("HPU", 0)] == devices[2].uuid  # module 0 is HLML index 2
    # raylet started with HABANA_VISIBLE_MODULES=3,0: slot 1 is module 0
    visible = {"HABANA_VISIBLE_MODULES": ("3", "0")}
    assert slot_devices(devices, visible) == {("HPU", 0): devices[0].uuid,
                                              ("HPU", 1): devices[2].uuid}
    holders = assign_holders(devices, visible, [Grant(RayIdentity(pid=4242), "HPU", 1, 1.0)])
    assert list(holders) == [devices[2].uuid]


def test_holders_are_judged_by_the_device_for_hlml_lists_no_processes(open_gaudi):
    idle_card = {"uuid": uuid(1), "serial": "SN1", "pci_bus_id": "0000:1a:00.0",
                 "module_id": MODULES[1], "utilization_percent": 0}
    doc = gaudi_scenario()
    doc["gaudi"]["devices"][1] = idle_card
    backend, devices, _ = open_gaudi(doc)
    holder = (Holder(RayIdentity(pid=4242), 1.0),)
    idle = {}
    for device in devices[:2]:
        sample = backend.sample(device)
        assert sample.up and sample.processes == () and not sample.processes_listed
        (found,) = allocations(sample, {device.uuid: holder})
        idle[device.index] = found.idle
    assert idle == {"0": False, "1": True}  # busy card: not idle; idle card: idle


def test_a_real_process_loads_the_cards_of_its_visible_modules(open_gaudi):
    backend, devices, hardware = open_gaudi(driven_by_workloads(gaudi_scenario()))
    by_module = {int(d.facts["module_id"]): d for d in devices}

    def load(module: int) -> tuple[dict, dict]:
        sample = backend.sample(by_module[module])
        return values(sample, m.GPU_UTILIZATION), values(sample, m.MEMORY_USAGE)

    assert load(3) == ({(("task", "general"),): 0.0}, {(): 0.0})
    with simulated_worker("ray_accel.exporter.simulate.gaudi_fake",
                          "open_modules(memory_bytes=2**30, utilization_percent=40)",
                          {**hardware.environ(), "HABANA_VISIBLE_MODULES": "3,0"}) as (_, printed):
        assert printed == "[3, 0]"  # in HLML index order
        time.sleep(0.05)  # the fake looks at the scenario file at most every 10 ms
        for module in (3, 0):
            assert load(module) == ({(("task", "general"),): 0.4}, {(): float(GIB)})
        assert load(1) == ({(("task", "general"),): 0.0}, {(): 0.0})
    assert load(3) == ({(("task", "general"),): 0.0}, {(): 0.0})  # gone with the process


def test_gaudi_sections_are_checked():
    with pytest.raises(ScenarioError, match=r"gaudi\.devices\[1\]\.module_id: 3 is also used"):
        load_scenario(gaudi_scenario(devices=2) | {"gaudi": {"devices": [
            {"uuid": "a", "pci_bus_id": "0000:19:00.0", "module_id": 3},
            {"uuid": "b", "pci_bus_id": "0000:1a:00.0", "module_id": 3}]}})
    with pytest.raises(ScenarioError, match=r"gaudi\.device_defaults\.nic\.down\[0\]"):
        doc = gaudi_scenario()
        doc["gaudi"]["device_defaults"]["nic"]["down"] = [9]
        load_scenario(doc)
    with pytest.raises(ScenarioError, match=r"gaudi\.workloads\[0\]\.modules\[0\]: no card"):
        load_scenario(gaudi_scenario(workloads=[{"pid": 10, "modules": [7]}]))
    with pytest.raises(ScenarioError, match=r"nic\.stats_latency_s: must be <= 1"):
        doc = gaudi_scenario()
        doc["gaudi"]["device_defaults"]["nic"]["stats_latency_s"] = 5
        load_scenario(doc)
    with pytest.raises(ScenarioError, match=r"gaudi\.errors\[0\]\.function: unknown pyhlml"):
        load_scenario(gaudi_scenario(errors=[{"function": "hlmlBogus", "code": 3}]))
    with pytest.raises(ScenarioError, match=r"gaudi\.devices\[0\]\.utilization_percent"):
        doc = gaudi_scenario()
        doc["gaudi"]["devices"][0]["utilization_percent"] = 120
        load_scenario(doc)


def test_shipped_gaudi2_node(open_gaudi):
    backend, devices, _ = open_gaudi("gaudi2-8")
    assert len(devices) == 8 and {d.model for d in devices} == {"HL-225"}
    assert sorted(d.facts["module_id"] for d in devices) == [str(i) for i in range(8)]
    assert any(d.facts["module_id"] != d.index for d in devices)
    sample = backend.sample(devices[0])
    assert values(sample, m.MEMORY_LIMIT) == {(): 96 * 1024 * 2**20}
    assert len(sample.links) == 24
    assert sum(link.facts["remote_type"] == "gpu" for link in sample.links) == 21


def test_backend_is_found_through_its_entry_point():
    (found,) = [e for e in entry_points(group="ray_accel.backends") if e.name == "gaudi"]
    assert found.load() is GaudiBackend


def test_a_utilization_past_100_reaches_the_reading_checks(open_gaudi, monkeypatch):
    """The driver answers 250 % (the fake never does; its function is replaced here by one
    returning the binding's own structure): the reading is refused with why and counted,
    not dropped unseen."""
    backend, devices, _ = open_gaudi(gaudi_scenario(devices=1))
    library = backend._library
    types = sys.modules[library.__name__ + ".hlml_types"]

    def rates(handle):
        answer = types.c_hlml_utilization()
        answer.aip, answer.memory = 250, 40
        return answer

    monkeypatch.setattr(library, "hlmlDeviceGetUtilizationRates", rates)
    tally = ErrorTally()
    checked = ReadingValidator(tally, "gaudi").check(backend.sample(devices[0]))
    assert (m.GPU_UTILIZATION, (("task", "general"),)) not in {
        (r.metric, r.labels) for r in checked.readings}
    assert values(checked, m.MEMORY_BANDWIDTH_UTILIZATION) == {(): 0.4}
    assert checked.errors[m.GPU_UTILIZATION].startswith(OUT_OF_RANGE)
    assert tally.snapshot() == {(OUT_OF_RANGE, m.GPU_UTILIZATION): 1}
