"""What the agent logs at start and on retries: quiet for vendors that are not on the host,
a WARNING for hardware that is there but cannot be read and for a device that goes down.

Real agents (`ray-accel agent --simulate`) with their backends retried every 0.3 s, so a
log line repeated on every retry would show many times within the test.
"""

from __future__ import annotations

import time

from agent_process import AgentProcess, write_scenario

from ray_accel.exporter.model import BackendStatus
from ray_accel.exporter.simulate import load_scenario
from ray_accel.exporter.start_report import start_report

RETRY = ("--interval", "0.1", "--retry", "0.3")
OTHER_FAMILIES = ("gaudi", "neuron", "tpu")


def _log_of(*args: str, seconds: float = 3, until=None) -> list[str]:
    """Everything `ray-accel agent ARGS` wrote, run (and retrying) for `seconds` after its
    snapshot meets `until` (its third cycle by default)."""
    with AgentProcess(*args, *RETRY) as agent:
        agent.wait_for(until or (lambda d: d["cycle"] >= 3), timeout=30)
        time.sleep(seconds)
    return "".join([*agent.output, agent.proc.stdout.read()]).splitlines()


def _naming(lines: list[str], word: str) -> list[str]:
    return [line for line in lines if word in line]


def test_vendors_not_on_the_host_are_one_report_line_not_a_warning_per_retry():
    lines = _log_of("--simulate", "hgx-h200")
    warnings = _naming(lines, " WARNING ")
    assert warnings == [], "\n".join(lines)
    reports = _naming(lines, "backends: ")
    assert reports == [line for line in lines if "INFO ray_accel.exporter.sampler" in line]
    assert len(reports) == 1, "\n".join(lines)
    assert reports[0].endswith("backends: nvidia 8 devices; not present: amd, gaudi, neuron, tpu")
    for vendor in ("amd", *OTHER_FAMILIES):
        assert _naming(lines, vendor) == reports, "\n".join(lines)
    # The report is the agent's first word on its devices: nothing before it names them.
    first = lines.index(reports[0])
    assert not [line for line in lines[:first] if "nvidia" in line or "device" in line], lines


def test_hardware_that_is_there_but_unreadable_warns_once_however_often_it_is_retried(
        tmp_path):
    doc = load_scenario("mixed")  # its AMD GPU's device files are there; amdsmi will not load
    doc["amdsmi_import_error"] = "KeyError"
    lines = _log_of("--simulate", write_scenario(tmp_path, doc))
    amd_warnings = [line for line in _naming(lines, " WARNING ") if "amd" in line]
    assert len(amd_warnings) == 1, "\n".join(lines)
    assert "backend amd down" in amd_warnings[0] and "libamd_smi.so" in amd_warnings[0]
    reports = _naming(lines, "backends: ")
    assert len(reports) == 1
    assert reports[0].endswith("backends: nvidia 2 devices; down: amd; "
                               "not present: gaudi, neuron, tpu"), reports
    assert not [line for line in lines if "WARNING" in line and "amd" not in line], lines


def test_a_device_that_had_answered_and_is_lost_is_a_warning(tmp_path):
    doc = load_scenario("hgx-h200")
    # Late enough that GPU 3 has answered first even on a loaded machine: a device lost
    # before its first answer is a start-up failure, not a loss.
    doc["devices"][3]["lost_at_s"] = 5.0
    seen_up = False

    def answered_then_lost(snapshot: dict) -> bool:
        # GPU 3 itself (not its placeholder, which a loaded machine may still list)
        nonlocal seen_up
        gpu = next((x for x in snapshot["devices"]
                    if x["index"] == "3" and x["model"] != "unknown"), None)
        if gpu is not None and gpu["up"]:
            seen_up = True
        return seen_up and gpu is not None and not gpu["up"]

    lines = _log_of("--simulate", write_scenario(tmp_path, doc), seconds=1,
                    until=answered_then_lost)
    warnings = _naming(lines, " WARNING ")
    assert len(warnings) == 1, "\n".join(lines)
    assert "nvidia device 3 (GPU-" in warnings[0] and " down: " in warnings[0], warnings


def test_a_device_that_had_answered_and_hangs_is_a_warning_and_so_is_its_return(tmp_path):
    doc = load_scenario("hgx-h200")
    # a call made every cycle (GPU 5's link counters are read only when due: GPM measures them)
    doc["delays"] = [{"function": "nvmlDeviceGetTemperature", "device": 5, "seconds": 6,
                      "from_s": 1.5, "until_s": 2}]
    lines = _log_of("--simulate", write_scenario(tmp_path, doc), seconds=0.5,
                    until=lambda d: d["devices"][5]["up"] and d["cycle"] >= 80)
    warnings = _naming(lines, " WARNING ")
    assert len(warnings) == 1, "\n".join(lines)
    assert "nvidia device 5 (GPU-" in warnings[0] and "stopped answering" in warnings[0]
    back = _naming(lines, "answers again")
    assert len(back) == 1 and "nvidia device 5 (GPU-" in back[0], "\n".join(lines)
    assert lines.index(warnings[0]) < lines.index(back[0])


def test_a_driver_that_fails_where_its_gpus_are_warns_then_says_when_it_comes_up(tmp_path):
    doc = load_scenario("hgx-h200")  # simulated /dev/nvidia0..7 are there
    doc["errors"] = [{"function": "nvmlInit", "code": "DRIVER_NOT_LOADED", "until_s": 1.5}]
    lines = _log_of("--simulate", write_scenario(tmp_path, doc), seconds=0.5,
                    until=lambda d: len(d["devices"]) == 8)
    (warning,) = _naming(lines, " WARNING ")
    assert "backend nvidia down" in warning, warning
    (report,) = _naming(lines, "backends: ")
    assert report.endswith("backends: no devices found; down: nvidia; "
                           "not present: amd, gaudi, neuron, tpu"), report
    (up,) = _naming(lines, "backend nvidia up with 8 device(s)")
    assert " INFO " in up and lines.index(report) < lines.index(up)


def test_the_report_names_each_backend_by_what_it_found():
    statuses = [
        BackendStatus("nvidia", "nvidia", up=True, device_count=8),
        BackendStatus("amd", "amd", up=False, message="amdsmi failed"),
        BackendStatus("tpu", "google", up=False, absent=True, message="no TPU chips"),
        BackendStatus("neuron", "aws", up=False, message="not opened yet"),
        BackendStatus("gaudi", "intel", up=True, device_count=1),
    ]
    assert start_report(statuses, opening=["neuron"]) == (
        "backends: nvidia 8 devices, gaudi 1 device; down: amd; not present: tpu; "
        "still opening: neuron")
    assert start_report([statuses[2]], opening=[]) == (
        "backends: no devices found; not present: tpu")
