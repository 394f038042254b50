"""The NVIDIA backend's slow and rare cadences (exporter/backends/nvidia/cadence.py).

Values the catalog marks `Cadence.SLOW` (error counters, link states, the PCIe link's
current generation and width...) are read
on a device's first cycle and then every `slow_read_interval_s`, each GPU at its
own point of the interval; the energy counter (`Cadence.RARE`) the same way every
`RARE_READ_EVERY` intervals. In between their last values are exported with
their age, and a device lost in between keeps its counters. Per-process utilization
and each process list cost one driver call a read, not the binding's two. The real
nvidia-ml-py binding reads the fake libnvidia-ml.so.1 of the `hgx-h200` node
(its simulated driver time removed), on a clock the tests step.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text
from stepped_clock import SteppedClock

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.backends.nvidia.interconnect import NVLINK
from ray_accel.exporter.backends.nvidia.probes import (
    DEVICE_PROBES,
    RARE_PROBES,
    SLOW_PROBES,
    DeviceState,
)
from ray_accel.exporter.collective import interconnect_rate
from ray_accel.exporter.model import DeviceSample
from ray_accel.exporter.sampler import Sampler
from ray_accel.exporter.simulate import SimulatedHardware, load_scenario
from ray_accel.exporter.sinks.prometheus import snapshot_text
from ray_accel.exporter.store import SnapshotStore

INTERVAL_S = 10.0
GPUS = 8
ENERGY_CALL = "nvmlDeviceGetTotalEnergyConsumption"
SLOW_CALL = "nvmlDeviceGetPcieReplayCounter"  # one of the slow probes' calls
PROCESS_CALL = "nvmlDeviceGetProcessUtilization"
LIST_CALL = "nvmlDeviceGetComputeRunningProcesses_v3"


@pytest.fixture
def node(tmp_path, monkeypatch) -> Iterator[SimulatedHardware]:
    """The simulated 8x H200 node, running in real time, without its simulated driver time."""
    doc = copy.deepcopy(load_scenario("hgx-h200"))
    doc["delays"] = []
    # NVLink CRC, replay and recovery errors counting up on every link (fields 161-163)
    for device in doc["devices"]:
        device.setdefault("fields", {}).update({
            str(field): {"*": {"start": 100, "rate_per_s": 50}}
            for field in (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
                          pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
                          pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC)})
    with SimulatedHardware.start(doc, state_dir=tmp_path) as hardware:
        hardware.activate()
        yield hardware


@pytest.fixture
def nvml_calls(monkeypatch) -> Counter[str]:
    """NVML C functions called, by name (the binding looks each one up on every call)."""
    counts: Counter[str] = Counter()
    lookup = pynvml._nvmlGetFunctionPointer

    def counted(name: str):
        counts[name] += 1
        return lookup(name)

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", counted)
    return counts


def _opened(clock: SteppedClock, interval_s: float = INTERVAL_S) -> tuple[NvidiaBackend, list]:
    backend = NvidiaBackend(clock=clock, slow_read_interval_s=interval_s)
    return backend, list(backend.open())


def _started(sampler: Sampler) -> None:
    """Cycles until every GPU answered (a loaded machine may need more than one to open)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snapshot = sampler.run_cycle()
        if len(snapshot.devices) == GPUS and all(d.up and d.readings for d in snapshot.devices):
            return
    raise AssertionError("the simulated GPUs did not all answer within 60 s")


def _slow_ages(snapshot) -> dict[str, float]:
    """GPU index -> ray_accelerator_device_slow_values_age_seconds in the snapshot's /metrics."""
    return {s.labels["index"]: s.value for family in parse_text(snapshot_text(snapshot).decode())
            for s in family.samples if s.name == "ray_accelerator_device_slow_values_age_seconds"}


def _lose(index: int, at_s: float, doc: dict) -> None:
    doc["devices"][index]["lost_at_s"] = at_s


def _value(sample: DeviceSample, metric: str, **labels: str) -> float | None:
    wanted = tuple(labels.items())
    return next((r.value for r in sample.readings if r.metric == metric and r.labels == wanted),
                None)


def _link_values(sample: DeviceSample, metric: str) -> dict[tuple[int, tuple], float]:
    return {(link.index, r.labels): r.value for link in sample.links
            if link.link_type == NVLINK for r in link.readings if r.metric == metric}


def _reads_over(seconds: int, call: str, metric: str, nvml_calls: Counter[str]
                ) -> tuple[dict[str, list[int]], dict[str, list[float | None]]]:
    """GPU index -> the seconds (of one cycle a second) at which `call` was made, and the
    values of `metric` each cycle exported."""
    clock = SteppedClock(1000.0)
    backend, devices = _opened(clock)
    try:
        read_at: dict[str, list[int]] = {d.index: [] for d in devices}
        values: dict[str, list[float | None]] = {d.index: [] for d in devices}
        for second in range(seconds):
            clock.now = 1000.0 + second
            for device in devices:
                before = nvml_calls[call]
                sample = backend.sample(device)
                assert sample.up
                if nvml_calls[call] > before:
                    read_at[device.index].append(second)
                values[device.index].append(_value(sample, metric))
            time.sleep(0.01)  # the simulated energy counter moves on meanwhile
    finally:
        backend.close()
    return read_at, values


def _at_most_one_gpu_per_later_cycle(read_at: dict[str, list[int]]) -> bool:
    later = Counter(t for times in read_at.values() for t in times if t > 0)
    return max(later.values()) == 1


def test_slow_values_are_read_on_their_cadence_spread_over_the_gpus(node, nvml_calls):
    read_at, _ = _reads_over(31, SLOW_CALL, m.SLOW_VALUES_AGE, nvml_calls)
    # the first cycle reads everything; then each GPU every 10 s, at its own point
    assert read_at["0"] == [0, 10, 20, 30]
    assert read_at["4"] == [0, 5, 15, 25]
    assert all(times[0] == 0 and len(times) in (3, 4) for times in read_at.values())
    assert _at_most_one_gpu_per_later_cycle(read_at)  # no cycle pays for two GPUs' slow reads


def test_energy_is_read_on_the_rare_cadence_and_exported_as_last_read(node, nvml_calls):
    read_at, energy = _reads_over(61, ENERGY_CALL, m.ENERGY, nvml_calls)
    # every 3 slow intervals (30 s), each GPU at its own point of them (GPU 2's at 7.5 s)
    assert read_at["0"] == [0, 30, 60]
    assert read_at["4"] == [0, 15, 45]
    assert read_at["2"] == [0, 8, 38]
    assert _at_most_one_gpu_per_later_cycle(read_at)
    for index, series in energy.items():  # in between, the value last read; fresh at each read
        for second in range(1, 61):
            if second in read_at[index]:
                assert series[second] > series[second - 1]
            else:
                assert series[second] == series[second - 1]


def test_the_age_of_slow_values_is_exported_with_them(node):
    clock = SteppedClock(1000.0)
    backend, devices = _opened(clock)
    first = devices[0]
    try:
        ages = []
        for second in (0, 3, 9, 10, 12, 19, 20, 29, 30, 31):
            clock.now = 1000.0 + second
            sample = backend.sample(first)
            ages.append((_value(sample, m.SLOW_VALUES_AGE), _value(sample, m.RARE_VALUES_AGE)))
    finally:
        backend.close()
    # GPU 0 reads its slow values at 0, 10, 20..., its energy at 0, 30, 60...
    assert [slow for slow, _ in ages] == [0.0, 3.0, 9.0, 0.0, 2.0, 9.0, 0.0, 9.0, 0.0, 1.0]
    assert [rare for _, rare in ages] == [0.0, 3.0, 9.0, 10.0, 12.0, 19.0, 20.0, 29.0, 0.0, 1.0]


def test_the_age_reaches_prometheus_and_fresh_values_stay_fresh(node):
    clock = SteppedClock(1000.0)
    backend = NvidiaBackend(clock=clock, slow_read_interval_s=INTERVAL_S)
    sampler = Sampler([backend], SnapshotStore(), interval_s=1.0)
    try:
        _started(sampler)
        clock.now += 4.0
        # cycles at +4 s until two give the same ages: a late answer from before (a busy
        # machine) is taken by the next cycle, and then every GPU has been read at +4 s
        ages, previous = _slow_ages(sampler.run_cycle()), None
        deadline = time.monotonic() + 60
        while ages != previous and time.monotonic() < deadline:
            ages, previous = _slow_ages(sampler.run_cycle()), ages
    finally:
        sampler.stop()
    # GPUs 1-3 were due 1.25, 2.5 and 3.75 s after the first read; the others wait
    assert ages == {"0": 4.0, "1": 0.0, "2": 0.0, "3": 0.0, "4": 4.0, "5": 4.0, "6": 4.0,
                    "7": 4.0}


def _pcie_values(sample: DeviceSample) -> dict[tuple, float]:
    return {r.labels: r.value for link in sample.links if link.link_type == m.LINK_PCIE
            for r in link.readings if r.metric == m.LINK_IO}


def _counter_ages(sample: DeviceSample) -> dict[str, float]:
    """link type -> the age of its byte counters."""
    return {dict(r.labels)["link_type"]: r.value for r in sample.readings
            if r.metric == m.LINK_COUNTERS_AGE}


def test_pcie_bytes_before_two_wraps_nvlink_bytes_errors_and_states_on_the_cadence(node,
                                                                                  nvml_calls):
    clock = SteppedClock(1000.0)
    backend, devices = _opened(clock)
    gpu = devices[0]
    try:
        samples, states, field_calls = [], [], []
        for second in (0, 1, 2, 3, 10):
            clock.now = 1000.0 + second
            before = Counter(nvml_calls)
            samples.append(backend.sample(gpu))
            states.append(nvml_calls["nvmlDeviceGetNvLinkState"]
                          - before["nvmlDeviceGetNvLinkState"])
            field_calls.append(nvml_calls["nvmlDeviceGetFieldValues"]
                               - before["nvmlDeviceGetFieldValues"])
            time.sleep(0.05)  # the training traffic moves the byte counters
    finally:
        backend.close()
    links = len([link for link in samples[0].links if link.link_type == NVLINK])
    assert links == 18
    assert field_calls == [1, 0, 0, 1, 1]  # at most one field-values call per cycle
    assert states == [links, 0, 0, 0, links]  # link states on the slow cycles only
    # GPU 0 receives 2.6 GB/s over PCIe: where GPM measured every link (from the second
    # cycle on) its 32-bit PCIe counters are read alone before GPM's bytes since their last
    # read could reach two wraps (8 GiB: at 3 s); the NVLinks' (64-bit) at the slow reads;
    # both exported as last read in between, each link type with its own age
    pcie = [_pcie_values(s) for s in samples]
    assert len(pcie[0]) == 2 and pcie[2] == pcie[1] == pcie[0]
    assert pcie[3] != pcie[2] and pcie[4] != pcie[3]
    assert all(_measured(s) for s in samples[1:])
    transmitted = [_link_values(s, m.LINK_IO) for s in samples]
    assert len(transmitted[0]) == links * 2
    assert transmitted[1] == transmitted[2] == transmitted[3] == transmitted[0]
    assert transmitted[4] != transmitted[0]
    assert [_counter_ages(s) for s in samples] == [
        {NVLINK: 0.0, m.LINK_PCIE: 0.0}, {NVLINK: 1.0, m.LINK_PCIE: 1.0},
        {NVLINK: 2.0, m.LINK_PCIE: 2.0}, {NVLINK: 3.0, m.LINK_PCIE: 0.0},
        {NVLINK: 0.0, m.LINK_PCIE: 0.0}]
    errors = [_link_values(s, m.LINK_ERRORS) for s in samples]
    assert len(errors[0]) == links * 3  # crc, replay, recovery per link
    assert errors[1] == errors[2] == errors[3] == errors[0]  # exported as last read
    assert all(errors[4][key] > errors[0][key] for key in errors[0])  # read again at 10 s
    up = [_link_values(s, m.LINK_UP) for s in samples]
    assert up[0] and up[1] == up[0] and up[4] == up[0]


def test_a_gpu_lost_between_slow_reads_keeps_its_counters(node):
    clock = SteppedClock(1000.0)
    backend = NvidiaBackend(clock=clock, slow_read_interval_s=INTERVAL_S)
    sampler = Sampler([backend], SnapshotStore(), interval_s=1.0)
    try:
        _started(sampler)  # every slow value read
        clock.now += 1.0  # and left there: GPU 5 is due 6.25 s after its first read
        before = after = None
        deadline = time.monotonic() + 60
        while after is None and time.monotonic() < deadline:
            sample = sampler.run_cycle().devices[5]
            if before is None:
                if sample.up and _value(sample, m.SLOW_VALUES_AGE) == 1.0:  # read at +1 s
                    before = sample
                    node.modify(partial(_lose, 5, node.elapsed_s()))
            elif sample.up:  # read before the loss took (a late answer on a busy machine)
                before = sample
            else:
                after = sample
    finally:
        sampler.stop()
    assert before is not None and after is not None, "GPU 5 was not reported lost within 60 s"
    assert _value(before, m.SLOW_VALUES_AGE) == 1.0
    for metric, labels in ((m.ENERGY, {}), (m.HW_ERRORS, {"error_type": "ecc_corrected"}),
                           (m.HW_ERRORS, {"error_type": "pcie_replay"})):
        assert _value(before, metric, **labels) is not None
        assert _value(after, metric, **labels) == _value(before, metric, **labels)
    assert _link_values(after, m.LINK_ERRORS) == _link_values(before, m.LINK_ERRORS)
    assert _link_values(after, m.LINK_IO) == _link_values(before, m.LINK_IO)
    # gauges are not true any more: the age of the slow values goes with them
    assert _value(after, m.SLOW_VALUES_AGE) is None and _value(after, m.POWER_LIMIT) is None


def test_every_slow_probe_metric_is_slow_in_the_catalog_and_no_cycle_probe_metric_is(node):
    backend, devices = _opened(SteppedClock(1000.0))
    try:
        tracked = backend._tracked[devices[0].uuid]
        state = DeviceState()
        slow = {r.metric for probe in SLOW_PROBES
                for r in probe(tracked.calls, tracked.handle, state)}
        every = {r.metric for probe in DEVICE_PROBES
                 for r in probe(tracked.calls, tracked.handle, state)}
        rare = {r.metric for probe in RARE_PROBES
                for r in probe(tracked.calls, tracked.handle, state)}
    finally:
        backend.close()
    assert {m.POWER_LIMIT, m.HW_ERRORS} <= slow and rare == {m.ENERGY}
    assert {m.FABRIC_STATE, m.FABRIC_INFO} <= every
    assert all(m.spec(metric).cadence is m.Cadence.SLOW for metric in slow)
    assert all(m.spec(metric).cadence is m.Cadence.RARE for metric in rare)
    assert all(m.spec(metric).cadence is m.Cadence.CYCLE for metric in every)


def test_interval_zero_reads_slow_values_every_cycle(node, nvml_calls):
    clock = SteppedClock(1000.0)
    backend, devices = _opened(clock, interval_s=0.0)
    try:
        for second in range(3):
            clock.now = 1000.0 + second
            backend.sample(devices[0])
    finally:
        backend.close()
    assert nvml_calls[ENERGY_CALL] == 3


def test_a_negative_slow_read_interval_is_refused():
    with pytest.raises(ValueError, match="slow_read_interval_s"):
        Sampler([NvidiaBackend()], SnapshotStore(), slow_read_interval_s=-1.0)


@pytest.mark.parametrize(("member", "value_type", "value"), [
    ("dVal", pynvml.NVML_VALUE_TYPE_DOUBLE, 2.5),
    ("uiVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 2**32 - 1),
    ("ullVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 2**40 + 3),
    ("sllVal", pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, -7),
    ("siVal", pynvml.NVML_VALUE_TYPE_SIGNED_INT, -5),
    ("usVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, 65535),
])
def test_field_values_are_read_back_as_their_value_type_says(member, value_type, value):
    # The link counters' answers are read in one copy of the array (cheaper than ctypes'
    # attribute access per field): each type must come out as the binding reads it.
    from ray_accel.exporter.backends.nvidia import interconnect

    values = (interconnect._PlainFieldValue * 2)()
    values[0].valueType, values[0].nvmlReturn = value_type, pynvml.NVML_SUCCESS
    setattr(values[0].value, member, value)
    values[1].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    (kind, status, raw), (_, missing, _) = interconnect._field_answers(values)
    assert (kind, status, missing) == (value_type, pynvml.NVML_SUCCESS,
                                       pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert interconnect._field_number(kind, raw) == getattr(values[0].value, member) == value


def _crowd(pids: list[int], doc: dict) -> None:
    """GPU 7 (idle and empty in the scenario) gets a process per pid, each its own SM share."""
    doc["devices"][7]["processes"] = [
        {"pid": pid, "used_memory_bytes": 2**30, "sm_percent": 1 + n, "memory_percent": 2}
        for n, pid in enumerate(pids)]


def test_process_utilization_and_lists_are_one_driver_call_each_buffers_grown_once(
        node, nvml_calls):
    pids = list(range(50001, 50041))  # more samples than the buffer first holds
    node.modify(partial(_crowd, pids))
    clock = SteppedClock(1000.0)
    backend, devices = _opened(clock)
    gpu = next(d for d in devices if d.index == "7")
    try:
        handle = backend._tracked[gpu.uuid].handle
        deadline = time.monotonic() + 30
        while (len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) < len(pids)
               and time.monotonic() < deadline):
            time.sleep(0.02)  # the fake takes up a changed scenario within 10 ms
        calls, shares, memory = [], [], []
        for _ in range(3):
            clock.now += 1.0
            time.sleep(0.2)  # a newer sample each time: the driver samples every 167 ms
            before = Counter(nvml_calls)
            sample = backend.sample(gpu)
            calls.append([nvml_calls[name] - before[name] for name in (PROCESS_CALL, LIST_CALL)])
            memory.append({process.pid: r.value for process in sample.processes
                           for r in process.readings if r.metric == m.PROCESS_MEMORY_USAGE})
            shares.append({process.pid: value for process in sample.processes
                           for r in process.readings if r.metric == m.PROCESS_UTILIZATION
                           and r.labels == (("engine", m.ENGINE_SM),) for value in [r.value]})
    finally:
        backend.close()
    # too small once (the driver says how many), then one call each
    assert calls == [[2, 2], [1, 1], [1, 1]]
    expected = {pid: (1 + n) / 100 for n, pid in enumerate(pids)}
    assert shares == [expected] * 3
    assert memory == [dict.fromkeys(pids, float(2**30))] * 3


def _measured(sample: DeviceSample) -> bool:
    """Whether GPM measured the device's links this cycle."""
    return any(r.metric == m.LINK_THROUGHPUT for r in sample.readings)


def test_on_gpm_gpus_link_counters_are_read_when_due_and_stalls_judged_on_gpm(node,
                                                                              nvml_calls):
    clock = SteppedClock(1000.0)
    backend, devices = _opened(clock)
    gpus = {d.index: d for d in devices if d.index in ("0", "4", "7")}
    reads: dict[str, list[bool]] = {index: [] for index in gpus}
    samples: dict[str, list[DeviceSample]] = {index: [] for index in gpus}
    try:
        for second in range(12):
            clock.now = 1000.0 + second
            for index, gpu in gpus.items():
                before = nvml_calls["nvmlDeviceGetFieldValues"]
                samples[index].append(backend.sample(gpu))
                reads[index].append(nvml_calls["nvmlDeviceGetFieldValues"] > before)
    finally:
        backend.close()
    measured = {index: [_measured(s) for s in found] for index, found in samples.items()}
    assert sum(measured["7"]) >= 8  # GPM measures from the second cycle on
    # GPU 0 receives 2.6 GB/s over PCIe: while GPM measures, its 32-bit counters are read
    # every third cycle, before GPM's bytes since their last read could reach two wraps
    checked = [second for second in range(1, 10) if all(measured["0"][1:second + 1])]
    assert len(checked) >= 5
    assert [reads["0"][second] for second in checked] == [second % 3 == 0 for second in checked]
    # GPU 7 moves nothing and GPU 4 receives 0.9 GB/s (under two wraps in their slow
    # interval): their counters are read at their slow points (0 and 8.75 s: 9 s; 0 and
    # 5 s) and wherever GPM did not measure every link
    for index, slow_points in (("7", (0, 9)), ("4", (0, 5))):
        assert reads[index] == [second in slow_points or not measured[index][second]
                                for second in range(12)]
    for index, found in samples.items():
        for second, sample in enumerate(found):
            if measured[index][second]:  # the stall detector's rate: GPM's, this cycle's
                nvlinks = sum(r.value for r in sample.readings if r.metric == m.LINK_THROUGHPUT
                              and dict(r.labels)["link_type"] == NVLINK)
                assert interconnect_rate(sample) == nvlinks
                assert (nvlinks > 0) == (index != "7")
    # between reads the counters are the ones last read, and their age says how old
    seven = samples["7"]
    ages = [_counter_ages(s) for s in seven]
    for second in range(1, 12):
        if reads["7"][second]:
            assert ages[second] == {NVLINK: 0.0, m.LINK_PCIE: 0.0}
        else:
            assert ages[second] == {link_type: age + 1.0
                                    for link_type, age in ages[second - 1].items()}
            assert _link_values(seven[second], m.LINK_IO) == _link_values(seven[second - 1],
                                                                          m.LINK_IO)
    # GPU 0's reads for the PCIe counters' wraps read those alone: its NVLink counters
    # stay as read at its first cycle until its next slow point (10 s) while GPM measures
    zero = samples["0"]
    for second in checked:
        read = second % 3 == 0
        assert _counter_ages(zero[second]) == {NVLINK: float(second),
                                               m.LINK_PCIE: float(second % 3)}
        assert _link_values(zero[second], m.LINK_IO) == _link_values(zero[0], m.LINK_IO)
        assert (_pcie_values(zero[second]) != _pcie_values(zero[second - 1])) == read


FABRIC_CALL = "nvmlDeviceGetGpuFabricInfoV"
PCIE_CALLS = ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth")


def _downtrain_and_degrade(doc: dict) -> None:
    """GPU 0's PCIe link trains down to gen 4 x8 and its NVLink fabric turns unhealthy."""
    gpu = doc["devices"][0]
    gpu["pcie_link"] = {"gen_current": 4, "gen_max": 5, "width_current": 8, "width_max": 16}
    gpu["fabric"] = {**gpu["fabric"], "health_summary": "UNHEALTHY"}


def test_pcie_link_state_is_read_on_the_slow_cadence_and_the_fabric_every_cycle(node,
                                                                                nvml_calls):
    clock = SteppedClock(1000.0)
    backend, devices = _opened(clock)
    gpu = devices[0]
    try:
        handle = backend._tracked[gpu.uuid].handle
        samples, calls = [], []
        for second in (0, 1, 2, 9, 10):
            if second == 2:  # changed between GPU 0's slow reads (at 0 and 10 s)
                node.modify(_downtrain_and_degrade)
                deadline = time.monotonic() + 30
                while (pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle) != 4
                       and time.monotonic() < deadline):
                    time.sleep(0.02)  # the fake takes up a changed scenario within 10 ms
            clock.now = 1000.0 + second
            before = Counter(nvml_calls)
            samples.append(backend.sample(gpu))
            calls.append([nvml_calls[name] - before[name] for name in (FABRIC_CALL, *PCIE_CALLS)])
    finally:
        backend.close()
    assert calls == [[1, 1, 1], [1, 0, 0], [1, 0, 0], [1, 0, 0], [1, 1, 1]]
    generation = [_value(s, m.PCIE_GENERATION, state=m.PCIE_CURRENT) for s in samples]
    width = [_value(s, m.PCIE_WIDTH, state=m.PCIE_CURRENT) for s in samples]
    summary = [_value(s, m.FABRIC_HEALTH_SUMMARY) for s in samples]
    # the link as last read until the next slow read, which sees the change; the age says
    # how old; the fabric's health as of each cycle (the scenario's GPUs report none before)
    assert generation == [5.0, 5.0, 5.0, 5.0, 4.0] and width == [16.0] * 4 + [8.0]
    assert summary == [None, None, 2.0, 2.0, 2.0]
    assert all(_value(s, m.FABRIC_STATE) == 3.0 for s in samples)  # registered all along
    assert [_value(s, m.SLOW_VALUES_AGE) for s in samples] == [0.0, 1.0, 2.0, 9.0, 0.0]
    assert all(_value(s, m.PCIE_GENERATION, state=m.PCIE_MAX) == 5.0 for s in samples)
