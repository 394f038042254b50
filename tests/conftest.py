"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

# The helpers the test modules share (agent processes, Ray clusters, Prometheus...).
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from nvml_session import shutdown_all

from ray_accel.demo.local_cluster import LocalRayCluster
from ray_accel.exporter.backends.nvidia import NvidiaBackend
from ray_accel.exporter.simulate import STATE_ENV, SimulatedHardware

_test = threading.local()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _test.item = item


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _test.item = None


def _marked_ray_only(start_head: Callable[..., None]) -> Callable[..., None]:
    """Keeps the `ray` marker true: a test without it may not start a Ray cluster."""
    def start(self: LocalRayCluster, *args: Any, **kwargs: Any) -> None:
        item = getattr(_test, "item", None)
        if item is not None and item.get_closest_marker("ray") is None:
            raise RuntimeError(f"{item.nodeid} starts a Ray cluster: mark it @pytest.mark.ray")
        start_head(self, *args, **kwargs)

    return start


LocalRayCluster.start_head = _marked_ray_only(LocalRayCluster.start_head)


@pytest.fixture
def nvml(tmp_path) -> Iterator[Callable[..., SimulatedHardware]]:
    """start(scenario) -> hardware, activated in this process with NVML initialized."""
    counter = iter(range(1000))
    previous = os.environ.get(STATE_ENV)

    def start(scenario: Any) -> SimulatedHardware:
        hw = SimulatedHardware.start(scenario, state_dir=tmp_path / f"hw{next(counter)}")
        hw.activate()
        pynvml.nvmlInit()
        return hw

    shutdown_all()
    yield start
    shutdown_all()
    if previous is None:
        os.environ.pop(STATE_ENV, None)
    else:
        os.environ[STATE_ENV] = previous


@pytest.fixture
def open_backend(tmp_path):
    """Start simulated hardware in this process and open the backend on it."""
    opened: list[NvidiaBackend] = []
    previous = os.environ.get(STATE_ENV)

    def start(source, slow_read_interval_s: float = 0.0
              ) -> tuple[NvidiaBackend, list, SimulatedHardware]:
        # Every value every sample unless a test asks for the slow cadence (0: every cycle;
        # tests/test_nvidia_cadence.py tests the cadence itself).
        hardware = SimulatedHardware.start(source, state_dir=tmp_path)
        hardware.activate()
        backend = NvidiaBackend(slow_read_interval_s=slow_read_interval_s)
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
