"""ROCm 7 activity on AMD GPUs: per-XCC busy and the SMU's residency accumulators.

The simulated amdsmi answers `amdsmi_get_gpu_metrics_info` and
`amdsmi_get_violation_status` with the real shapes (per-[XCP][XCC] lists of
lists, "N/A" where unsupported, the 6.3 Python API's smaller key sets), and
the backend turns them into ratios, absent wherever the API has no value.
"""

from __future__ import annotations

import copy
import time

import pytest
from amd_support import amd_backends, amd_scenario, amdsmi_modules, simulation

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.amd.xcp import Residency, accumulators
from ray_accel.exporter.backends.base import ErrorTally
from ray_accel.exporter.model import labels_of
from ray_accel.exporter.simulate import ScenarioError, load_scenario
from ray_accel.exporter.validation import ReadingValidator

NA = "N/A"
BUSY = [90, 80, 70, 60, 50, 40, 30, 20]
# The keys of amdsmi 6.3's amdsmi_get_violation_status (py-interface/amdsmi_interface.py)
VIOLATION_KEYS_6_3 = {
    "reference_timestamp", "violation_timestamp", "acc_counter",
    *(f"{prefix}_{name}" for prefix in ("acc", "per", "active")
      for name in ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm")),
}
NEW_IN_1_8 = ("xcp_stats.gfx_below_host_limit_ppt_acc", "xcp_stats.gfx_below_host_limit_thm_acc",
              "xcp_stats.gfx_low_utilization_acc", "xcp_stats.gfx_below_host_limit_total_acc")


def rocm7(devices: int = 2, **top) -> dict:
    """MI300X-like GPUs; the second reports ROCm 7's per-XCC fields (SPX, 8 XCCs)."""
    doc = amd_scenario(devices=devices, **top)
    doc["devices"][1].update({
        "num_xcc": 8, "xcc_gfx_busy_percent": BUSY,
        "xcc_clock_below_limit_percent": {"power": [10] * 8, "low_utilization": 30},
    })
    return doc


def cpx(doc: dict, index: int = 1) -> dict:
    """Device `index` split into eight CPX partitions, partition p busy 10 * p percent."""
    device = doc["devices"][index]
    device.pop("xcc_gfx_busy_percent", None)
    device.update({"compute_partition": "CPX", "gfx_activity_percent": 5, "partitions": [
        {"uuid": f"01ff74a1-0000-1000-8000-0000000000{p:02x}", "vram_total_mb": 24574,
         "gfx_activity_percent": 10 * p} for p in range(1, 8)]})
    return doc


@pytest.fixture
def amdsmi(tmp_path):
    """`amdsmi(doc)`: the simulated module on a scenario, initialised, and its hardware."""
    with simulation(tmp_path) as start, amdsmi_modules(start) as run:
        yield run


@pytest.fixture
def open_amd(tmp_path):
    with simulation(tmp_path) as start, amd_backends(start) as open_backend:
        yield open_backend


def xcp_values(sample, metric: str) -> dict[tuple, float]:
    return {r.labels: r.value for r in sample.readings if r.metric == metric}


def advance(hardware, module, handle, to_s: float) -> None:
    """Moves frozen scenario time to `to_s` and waits until the module answers from it."""
    hardware.modify(lambda doc: doc.update(freeze_at_s=to_s))
    deadline = time.monotonic() + 5
    while module.amdsmi_get_gpu_metrics_info(handle)["accumulation_counter"] != to_s * 100:
        assert time.monotonic() < deadline, "the scenario change did not arrive"
        time.sleep(0.02)


# -- the simulated module ----------------------------------------------------


def test_metrics_table_lists_busy_and_accumulators_per_xcp_and_xcc(amdsmi):
    module, _ = amdsmi(rocm7())
    table = module.amdsmi_get_gpu_metrics_info(module.amdsmi_get_processor_handles()[1])
    assert table["common_header.content_revision"] == 8 and table["num_partition"] == 1
    busy = table["xcp_stats.gfx_busy_inst"]
    # [AMDSMI_MAX_NUM_XCP][AMDSMI_MAX_NUM_XCC]: in SPX, XCP 0 holds all eight XCCs
    assert len(busy) == 8 and all(len(row) == 8 for row in busy)
    assert busy[0] == BUSY and busy[1:] == [[NA] * 8] * 7
    assert [len(row) for row in table["xcp_stats.jpeg_busy"]] == [40] * 8
    assert [len(row) for row in table["xcp_stats.vcn_busy"]] == [4] * 8
    # frozen at t = 10 s; the SMU's counter advances every 10 ms
    assert table["accumulation_counter"] == 1000
    assert table["ppt_residency_acc"] == 1000  # PPT held the whole time (100 %)
    assert table["socket_thm_residency_acc"] == 0
    assert table["hbm_thm_residency_acc"] == NA  # not in the scenario's throttle_percent
    assert table["xcp_stats.gfx_busy_acc"][0][0] == 90 * 1000  # a tick adds its percent
    assert table["xcp_stats.gfx_below_host_limit_ppt_acc"][0] == [100] * 8
    assert table["xcp_stats.gfx_low_utilization_acc"][0] == [300] * 8
    assert table["xcp_stats.gfx_below_host_limit_thm_acc"][0] == [0] * 8
    assert table["xcp_stats.gfx_below_host_limit_total_acc"][0] == [400] * 8
    assert table["xcp_stats.gfx_below_host_limit_total_acc"][1] == [NA] * 8
    assert table["xcp_stats.gfx_below_host_limit_acc"] == NA  # 1.7's total, gone in 1.8


@pytest.mark.parametrize("at_s", [0.29, 0.57, 1.13])  # where 100 % x t falls just short in floats
def test_a_limiter_that_always_held_counts_every_tick(amdsmi, at_s):
    doc = rocm7(freeze_at_s=at_s)
    doc["devices"][1]["xcc_clock_below_limit_percent"] = {"low_utilization": 100}
    module, _ = amdsmi(doc)
    table = module.amdsmi_get_gpu_metrics_info(module.amdsmi_get_processor_handles()[1])
    ticks = table["accumulation_counter"]
    assert ticks == round(at_s * 100)
    assert table["xcp_stats.gfx_low_utilization_acc"][0] == [ticks] * 8
    assert table["xcp_stats.gfx_below_host_limit_total_acc"][0] == [ticks] * 8
    assert table["ppt_residency_acc"] == ticks


def test_a_gpu_without_per_xcc_fields_reports_them_not_available(amdsmi):
    module, _ = amdsmi(rocm7())
    table = module.amdsmi_get_gpu_metrics_info(module.amdsmi_get_processor_handles()[0])
    assert table["common_header.content_revision"] == 6
    for key in ("xcp_stats.gfx_busy_inst", *NEW_IN_1_8):
        assert table[key] == NA, key
    assert table["accumulation_counter"] == 1000  # its throttle residency is simulated


def test_cpx_partitions_are_one_xcp_each_with_their_own_busy(amdsmi):
    module, _ = amdsmi(cpx(rocm7()))
    handles = module.amdsmi_get_processor_handles()
    assert len(handles) == 2 + 7
    table = module.amdsmi_get_gpu_metrics_info(handles[1])
    assert table["num_partition"] == 8
    busy = table["xcp_stats.gfx_busy_inst"]
    assert [row[0] for row in busy] == [5, 10, 20, 30, 40, 50, 60, 70]
    assert all(row[1:] == [NA] * 7 for row in busy)
    assert [row[0] for row in table["xcp_stats.gfx_low_utilization_acc"]] == [300] * 8


def test_violation_status_has_per_xcc_lists(amdsmi):
    module, _ = amdsmi(rocm7())
    handle = module.amdsmi_get_processor_handles()[1]
    status = module.amdsmi_get_violation_status(handle)
    table = module.amdsmi_get_gpu_metrics_info(handle)
    assert status["acc_counter"] == table["accumulation_counter"]
    assert status["acc_ppt_pwr"] == table["ppt_residency_acc"]
    assert status["per_low_utilization"][0] == [30] * 8
    assert status["per_low_utilization"][1] == [NA] * 8
    assert status["active_low_utilization"][0] == [True] * 8
    assert status["active_gfx_clk_below_host_limit_thm"][0] == [False] * 8
    assert status["per_gfx_clk_below_host_limit_total"][0] == [40] * 8
    assert status["acc_gfx_clk_below_host_limit_pwr"][0] == [100] * 8
    assert status["acc_gfx_clk_below_host_limit"] == NA
    other = module.amdsmi_get_violation_status(module.amdsmi_get_processor_handles()[0])
    assert other["per_low_utilization"] == [[NA] * 8] * 8


def test_the_6_3_python_api_lacks_the_newer_keys(amdsmi):
    module, _ = amdsmi(rocm7(amdsmi_interface="6.3"))
    handle = module.amdsmi_get_processor_handles()[1]
    table = module.amdsmi_get_gpu_metrics_info(handle)
    assert len(table) == 69  # the keys of amdsmi 6.3's amdsmi_get_gpu_metrics_info
    for key in ("common_header.content_revision", "xgmi_link_status", *NEW_IN_1_8):
        assert key not in table
    assert table["xcp_stats.gfx_busy_inst"][0] == BUSY  # 1.6: there since 6.3
    assert set(module.amdsmi_get_violation_status(handle)) == VIOLATION_KEYS_6_3


@pytest.mark.parametrize(("change", "message"), [
    ({"xcc_gfx_busy_percent": 50}, r"devices\[0\].xcc_gfx_busy_percent: needs num_xcc"),
    ({"num_xcc": 8, "xcc_gfx_busy_percent": [50] * 7},
     r"xcc_gfx_busy_percent: lists 7 XCCs, the device has num_xcc 8"),
    ({"num_xcc": 9}, r"devices\[0\].num_xcc: must be <= 8"),
    ({"num_xcc": 8, "xcc_gfx_busy_percent": [50] * 7 + [101]},
     r"xcc_gfx_busy_percent\[7\]: must be <= 100"),
    ({"num_xcc": 8, "xcc_clock_below_limit_percent": {"fan": 1}},
     r"xcc_clock_below_limit_percent.fan: unknown key"),
    ({"xcc_clock_below_limit_percent": {"power": 1}},
     r"xcc_clock_below_limit_percent.power: needs num_xcc"),
    ({"num_xcc": 8, "compute_partition": "TPX", "partitions": [
        {"uuid": "01ff74a1-0000-1000-8000-0000000000f1"},
        {"uuid": "01ff74a1-0000-1000-8000-0000000000f2"}]},
     r"num_xcc: 8 XCCs cannot be split evenly over 3 partitions"),
])
def test_invalid_per_xcc_keys_are_clear_errors(change, message):
    doc = amd_scenario(devices=1)
    doc["devices"][0].update(change)
    with pytest.raises(ScenarioError, match=message):
        load_scenario(doc)


def test_unknown_python_api_release_is_refused():
    with pytest.raises(ScenarioError, match=r"amdsmi_interface: expected one of 6.3, 7.0"):
        load_scenario(amd_scenario(devices=1, amdsmi_interface="5.7"))


# -- the backend ---------------------------------------------------------------


def test_per_xcc_busy_is_exported_as_ratios(open_amd):
    backend, devices, _ = open_amd(rocm7())
    busy = xcp_values(backend.sample(devices[1]), m.XCP_GFX_UTILIZATION)
    assert busy == {labels_of({"xcp": "0", "xcc": str(i)}): value / 100
                    for i, value in enumerate(BUSY)}
    assert xcp_values(backend.sample(devices[0]), m.XCP_GFX_UTILIZATION) == {}  # "N/A"


def test_cpx_busy_is_labelled_by_partition(open_amd):
    backend, devices, _ = open_amd(cpx(rocm7()))
    board = next(d for d in devices if d.index == "1")
    busy = xcp_values(backend.sample(board), m.XCP_GFX_UTILIZATION)
    assert busy == {labels_of({"xcp": str(p), "xcc": "0"}): (10 * p or 5) / 100
                    for p in range(8)}
    partition = next(d for d in devices if d.index == "1/3")
    assert xcp_values(backend.sample(partition), m.XCP_GFX_UTILIZATION) == {}


def test_residency_is_the_share_of_the_interval_between_two_samples(open_amd):
    backend, devices, hardware = open_amd(rocm7())
    import amdsmi

    handle = amdsmi.amdsmi_get_processor_handles()[1]
    first = backend.sample(devices[1])
    assert xcp_values(first, m.THROTTLE_RESIDENCY) == {}  # one table: no interval yet
    assert xcp_values(first, m.XCP_GFX_BELOW_HOST_LIMIT) == {}
    advance(hardware, amdsmi, handle, 20.0)
    second = backend.sample(devices[1])
    residency = xcp_values(second, m.THROTTLE_RESIDENCY)
    assert residency == {labels_of({"reason": "sw_power_cap"}): 1.0,
                         labels_of({"reason": "socket_thermal"}): 0.0,
                         labels_of({"reason": "prochot"}): 0.0,
                         labels_of({"reason": "vr_thermal"}): 0.0}  # no hbm_thrm: absent
    below = xcp_values(second, m.XCP_GFX_BELOW_HOST_LIMIT)
    assert len(below) == 8 * 4
    for xcc in range(8):
        for reason, share in (("power", 0.1), ("thermal", 0.0), ("low_utilization", 0.3),
                              ("any", 0.4)):
            key = labels_of({"xcp": "0", "xcc": str(xcc), "reason": reason})
            assert below[key] == pytest.approx(share), key
    assert m.spec(m.XCP_GFX_BELOW_HOST_LIMIT).prometheus_name == (
        "ray_accelerator_amd_xcp_gfx_below_host_limit_ratio")
    assert m.spec(m.THROTTLE_RESIDENCY).prometheus_name == (
        "ray_accelerator_throttle_residency_ratio")
    tally = ErrorTally()
    ReadingValidator(tally, "amd").check(second)
    assert tally.snapshot() == {}


def test_throttling_comes_from_the_table_once_it_gives_an_interval(open_amd, monkeypatch):
    """amdsmi_get_violation_status waits 100 ms per call; with two tables it is not needed."""
    doc = rocm7()  # PPT holds until t = 20 s, then lets go
    doc["devices"][1]["throttle_percent"] = {
        **doc["amd_device_defaults"]["throttle_percent"],
        "ppt_pwr": {"keyframes": [[0, 100], [20, 0]], "interpolate": "step"}}
    backend, devices, hardware = open_amd(doc)
    import amdsmi

    asked = []
    real = amdsmi.amdsmi_get_violation_status
    monkeypatch.setattr(amdsmi, "amdsmi_get_violation_status",
                        lambda handle: asked.append(handle) or real(handle))
    first = xcp_values(backend.sample(devices[1]), m.THROTTLE_ACTIVE)
    assert first[labels_of({"reason": "sw_power_cap"})] == 1 and len(asked) == 1
    advance(hardware, amdsmi, amdsmi.amdsmi_get_processor_handles()[1], 20.0)
    second = xcp_values(backend.sample(devices[1]), m.THROTTLE_ACTIVE)
    assert len(asked) == 1
    assert second == {labels_of({"reason": reason}): value for reason, value in (
        ("sw_power_cap", 1), ("socket_thermal", 0), ("prochot", 0), ("vr_thermal", 0))}
    advance(hardware, amdsmi, amdsmi.amdsmi_get_processor_handles()[1], 30.0)
    third = xcp_values(backend.sample(devices[1]), m.THROTTLE_ACTIVE)
    assert third[labels_of({"reason": "sw_power_cap"})] == 0 and len(asked) == 1


def test_per_xcc_values_are_absent_not_zero_where_amdsmi_has_none(open_amd):
    doc = rocm7(devices=3, amdsmi_interface="6.3", errors=[
        {"function": "amdsmi_get_gpu_metrics_info", "device": 2, "code": "NOT_SUPPORTED"}])
    doc["devices"][2].update(copy.deepcopy({k: doc["devices"][1][k] for k in (
        "num_xcc", "xcc_gfx_busy_percent", "xcc_clock_below_limit_percent")}))
    backend, devices, hardware = open_amd(doc)
    import amdsmi

    backend.sample(devices[1])
    backend.sample(devices[2])
    advance(hardware, amdsmi, amdsmi.amdsmi_get_processor_handles()[1], 20.0)
    older = backend.sample(devices[1])
    # amdsmi 6.3: per-XCC busy and throttle residency, but no clock-below-limit keys
    assert len(xcp_values(older, m.XCP_GFX_UTILIZATION)) == 8
    assert xcp_values(older, m.THROTTLE_RESIDENCY)[labels_of({"reason": "sw_power_cap"})] == 1
    assert xcp_values(older, m.XCP_GFX_BELOW_HOST_LIMIT) == {}
    # the metrics table unsupported: none of them, the rest of the device still reports
    refused = backend.sample(devices[2])
    assert refused.up
    assert not any(r.metric in (m.XCP_GFX_UTILIZATION, m.THROTTLE_RESIDENCY,
                                m.XCP_GFX_BELOW_HOST_LIMIT) for r in refused.readings)
    assert any(r.metric == m.POWER for r in refused.readings)
    assert backend.errors.snapshot()[("not_supported", "amdsmi_get_gpu_metrics_info")] == 1


def test_older_tables_give_only_the_total_and_a_restarted_counter_gives_nothing():
    """GPU metrics 1.7 had one accumulator per XCC, for any limiter; a GPU reset restarts all."""
    table = {"accumulation_counter": 500, "num_partition": 1,
             "xcp_stats.gfx_below_host_limit_acc": [[100, NA], [NA, NA]],
             "xcp_stats.gfx_low_utilization_acc": NA, "ppt_residency_acc": NA}
    assert accumulators(table) == {
        (m.XCP_GFX_BELOW_HOST_LIMIT, labels_of({"xcp": "0", "xcc": "0", "reason": "any"})): 100}
    residency = Residency()
    assert residency.readings(table) == []
    later = {**table, "accumulation_counter": 1500,
             "xcp_stats.gfx_below_host_limit_acc": [[350, NA], [NA, NA]]}
    (found,) = residency.readings(later)
    assert found.value == 0.25
    assert residency.readings({**later, "accumulation_counter": 20}) == []  # reset
    assert residency.readings({**later, "accumulation_counter": 120}) != []


# -- the shipped scenario --------------------------------------------------------


def test_mi355x_node_reads_true_values_only(open_amd):
    backend, devices, _ = open_amd("mi355x-8")
    physical = [d for d in devices if not d.parent_uuid]
    assert len(physical) == 8 and len(devices) == 8 + 7  # GPU 4 in CPX: seven more
    assert {d.model for d in devices} == {"AMD Instinct MI355X"}
    assert {d.facts["architecture"] for d in physical} == {"gfx950"}
    tally = ErrorTally()
    validator = ReadingValidator(tally, "amd")
    for device in devices:  # the first tables: residency needs two
        validator.check(backend.sample(device))
    time.sleep(0.3)
    samples = {s.device.index: s for s in (validator.check(backend.sample(d)) for d in devices)}
    assert tally.snapshot() == {}
    busy = {i: xcp_values(samples[str(i)], m.XCP_GFX_UTILIZATION) for i in range(8)}
    assert all(len(found) == 8 for found in busy.values())
    assert {labels[0][1] for labels in busy[4]} == {str(p) for p in range(8)}  # CPX: 8 XCPs
    assert max(busy[5].values()) == 0 and min(busy[0].values()) > 0.5
    low = {i: [v for labels, v in xcp_values(samples[str(i)], m.XCP_GFX_BELOW_HOST_LIMIT).items()
               if ("reason", "low_utilization") in labels] for i in range(8)}
    assert low[5] == [1.0] * 8  # the idle holder: clocks held down for lack of work
    power = {i: next(r.value for r in samples[str(i)].readings if r.metric == m.POWER_LIMIT)
             for i in range(8)}
    assert set(power.values()) == {1400.0}
