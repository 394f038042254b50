"""What `ray-accel demo` prints, for tests: its output until it serves, its holder table."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time

READY_S = 300


def _lines_of(process: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def holder_rows(output: list[str]) -> list[tuple[str, str]]:
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
