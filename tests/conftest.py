"""Fixtures shared by several test modules."""

from __future__ import annotations

import os

import pytest

from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.simulate import STATE_ENV, SimulatedHardware


@pytest.fixture
def open_backend(tmp_path):
    """Start simulated hardware in this process and open the backend on it."""
    opened: list[NvidiaBackend] = []
    previous = os.environ.get(STATE_ENV)

    def start(source) -> tuple[NvidiaBackend, list, SimulatedHardware]:
        hardware = SimulatedHardware.start(source, state_dir=tmp_path)
        hardware.activate()
        backend = NvidiaBackend()
        devices = backend.open()
        opened.append(backend)
        return backend, devices, hardware

    yield start
    for backend in opened:
        backend.close()
    if previous is None:
        os.environ.pop(STATE_ENV, None)
    else:
        os.environ[STATE_ENV] = previous
