"""`ray-accel demo` on a TPU host, a Trainium node and a Gaudi node: workload, agent, table."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

READY_S = 300


pytestmark = pytest.mark.ray


def _lines_of(process: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _holder_rows(output: list[str]) -> list[tuple[str, str]]:
    """(holder, state) of each row of the demo's holder table."""
    start = next(i for i, line in enumerate(output) if line.startswith("dev ")) + 1
    rows = []
    for line in output[start:]:
        if not line.strip():
            break
        words = line.split()
        if not words[2].startswith("("):  # "(not allocated)", "(split into 2 parts)"
            rows.append((words[2], words[-1]))
    return rows


def demo_output(scenario: str) -> list[str]:
    """What `ray-accel demo --scenario SCENARIO` prints until it serves; stopped with Ctrl-C."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "ray_accel.exporter.cli", "demo", "--scenario", scenario,
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    try:
        lines = _lines_of(demo)
        deadline = time.monotonic() + READY_S
        while not any(line.lstrip().startswith("Metrics:") for line in output):
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            assert line is not None, "\n".join(output)
            output.append(line)
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=120)
    assert demo.returncode == 0, "\n".join(output)
    return output


@pytest.mark.parametrize(("scenario", "trainer_devices"),
                         [("tpu-v5e-8", 4), ("trn1-32xl", 4), ("gaudi2-8", 4)])
def test_the_demo_workload_runs_on_tpu_chips_neuroncores_and_gaudi_cards(scenario,
                                                                        trainer_devices):
    output = demo_output(scenario)
    rows = _holder_rows(output)
    states: dict[str, list[str]] = {}
    for holder, state in rows:
        states.setdefault(holder, []).append(state)
    assert states["Trainer"] == ["busy"] * trainer_devices, rows
    assert states["IdleHolder"] == ["IDLE"], rows
    assert states["preprocess"] == ["busy"], rows
