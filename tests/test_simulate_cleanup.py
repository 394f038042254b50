"""A `--simulate` agent removes its temporary `fakenvml-*` folder on every way out.

Real `ray-accel agent` subprocesses with TMPDIR pointing at the test's folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
from agent_process import AgentProcess


def _folders(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("fakenvml-*"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_removes_the_simulation_folder(tmp_path, signum):
    with AgentProcess("--simulate", "l4-pcie", env={"TMPDIR": str(tmp_path)}) as agent:
        status, _, _ = agent.get("/healthz")
        assert status in (200, 503)
        assert len(_folders(tmp_path)) == 1
        agent.proc.send_signal(signum)
        code = agent.proc.wait(timeout=30)
    assert code == 0
    assert _folders(tmp_path) == []


def test_failing_start_removes_the_simulation_folder(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "ray_accel.exporter.cli", "agent", "--no-ray", "--simulate",
             "l4-pcie", "--port", str(port)],
            env={**os.environ, "TMPDIR": str(tmp_path)},
            capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "cannot listen" in done.stderr
    assert _folders(tmp_path) == []
