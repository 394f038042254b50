"""What the simulated amdsmi functions share: "N/A", argument checks, the target of
board-level queries, live processes' load and amdsmi's BDF form."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from ray_accel.exporter.simulate.signals import value_at

from ._simulation import SIMULATION, Target, not_supported
from .amdsmi_exception import AmdSmiParameterException

NA = "N/A"


def check_enum(value: Any, enum: type[IntEnum]) -> None:
    if not isinstance(value, enum):
        raise AmdSmiParameterException(value, enum)


def required(found: Mapping[str, Any], key: str) -> Any:
    """The scenario's value of `key`; NOT_SUPPORTED, as amdsmi answers, when it is undefined."""
    value = found.get(key)
    if value is None:
        raise not_supported()
    return value


def optional_int(target: Target, key: str) -> Any:
    """A signal rounded to the integer the C struct holds, or "N/A" when undefined."""
    signal = target.value(key)
    return NA if signal is None else round(value_at(signal, SIMULATION.time()))


def process_load(device: Any, owner: Any) -> tuple[int, int]:
    """GFX percent and VRAM bytes the live processes of `owner` (the device or one of its
    partitions) add to it, on a device with `load_from_processes`; (0, 0) otherwise."""
    if not device.get("load_from_processes"):
        return 0, 0
    live = SIMULATION.live_processes(owner.get("processes"))
    return (sum(p.get("gfx_percent", 0) for p in live),
            sum(p.get("used_memory_bytes", 0) for p in live))


def with_process_load(device: Any, owner: Any, percent: Any) -> Any:
    """A GFX percent with the owner's processes' load added (at most 100); "N/A" stays."""
    gfx, _ = process_load(device, owner)
    if percent == NA or not gfx:
        return percent
    return percent + gfx if device.get("raw_values") else min(100, percent + gfx)


def board_target(target: Target | None) -> Target:
    """The target of a board-level query: secondary partitions do not answer them."""
    assert target is not None
    if target.partition_id:
        raise not_supported()
    return target


def amdsmi_bdf(bus_id: str) -> str:
    """amdsmi's BDF form, "0000:05:00.0", of a normalised "00000000:05:00.0" bus id."""
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
