"""Stands in for a vendor's Python binding: two accelerators and the errors such libraries raise.

`EXAMPLE_DEVICES` (environment) sets how many accelerators it has (default 2);
0 means the driver is not loaded. Accelerator 1 has no power sensor, and
`EXAMPLE_LOST` names an accelerator that has fallen off the bus.
"""

from __future__ import annotations

import math
import os
import time


class VendorError(Exception):
    """What the vendor library raises, with a status name like the real ones have."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


def init() -> None:
    if device_count() == 0:
        raise VendorError("DRIVER_NOT_LOADED")


def device_count() -> int:
    return int(os.environ.get("EXAMPLE_DEVICES", "2"))


def _check(index: int) -> None:
    if str(index) == os.environ.get("EXAMPLE_LOST"):
        raise VendorError("DEVICE_LOST")


def serial(index: int) -> str:
    _check(index)
    return f"EXA-{index:04d}"


def busy_percent(index: int) -> int:
    _check(index)
    return round(50 + 40 * math.sin(time.time() / 10 + index))


def memory_mib(index: int) -> tuple[int, int]:
    """(used, total) in MiB."""
    _check(index)
    return 1024 * (index + 1), 16384


def power_mw(index: int) -> int:
    _check(index)
    if index == 1:
        raise VendorError("NOT_SUPPORTED")
    return 75_000
