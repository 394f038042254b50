"""What `/healthz` says: whether sampling runs, and what on the node is not answering.

- `starting` (503): no cycle has completed yet;
- `stalled` (503): the sampling loop died or its last cycle is too old;
- `degraded` (200): sampling runs, but a backend that has (or should have)
  devices does not answer, or a device is down or stale; `not_answering`
  lists each, with why. It is 200 so that a liveness probe does not restart an
  agent for a lost GPU, which a restart would not bring back;
- `ok` (200): everything answers. A backend whose library and devices are
  both absent from the host (`BackendAbsent`) is fine: there is nothing to read.

Whatever the status, `unsupported` names the devices that lack a whole family of
metrics, once, rather than as an error on every cycle: `gpm` (NVIDIA GPM
activity, absent before Hopper or where it is off) and `pcie_io` (PCIe byte
counters that a device without GPM answers in 32 bits, which can wrap more than
once between two reads at the agent's interval: left out rather than undercounted).
"""

from __future__ import annotations

from typing import Any

from .backends.calls import NOT_SUPPORTED
from .model import DeviceSample, NodeSnapshot, stale_after_s

STARTING, STALLED, DEGRADED, OK = "starting", "stalled", "degraded", "ok"


def _device_problem(sample: DeviceSample) -> dict[str, str]:
    device = sample.device
    reason = "; ".join(f"{function}: {error}" for function, error in sample.errors.items())
    return {"vendor": device.vendor, "index": device.index, "uuid": device.uuid,
            "state": "stale" if sample.stale else "down",
            "reason": reason or "not answering"}


def not_answering(snapshot: NodeSnapshot) -> list[dict[str, str]]:
    """Every backend (not absent) that is down and every device down or stale, with why."""
    found: list[dict[str, str]] = [
        {"backend": b.name, "state": "down", "reason": b.message or "not answering"}
        for b in snapshot.backends if not b.up and not b.absent
    ]
    found.extend(_device_problem(s) for s in snapshot.devices if not s.up)
    return found


# Metric families a device may lack as a whole, by the key its samples' errors use.
FEATURES = ("gpm", "pcie_io")


def unsupported(snapshot: NodeSnapshot) -> dict[str, list[str]]:
    """Feature -> UUIDs of the answering devices that do not offer it."""
    found: dict[str, list[str]] = {}
    for sample in snapshot.devices:
        for feature in FEATURES:
            if sample.up and sample.errors.get(feature) == NOT_SUPPORTED:
                found.setdefault(feature, []).append(sample.device.uuid)
    return found


def health(snapshot: NodeSnapshot | None, sampler_alive: bool,
           now: float) -> tuple[dict[str, Any], int]:
    """The `/healthz` document and its HTTP status."""
    if snapshot is None:
        return ({"status": STARTING, "cycle": 0, "last_cycle_age_s": None, "backends": {},
                 "not_answering": [], "unsupported": {}}, 503)
    age = now - snapshot.taken_at
    problems = not_answering(snapshot)
    stalled = age > stale_after_s(snapshot.interval_s) + snapshot.interval_s
    if not sampler_alive or stalled:
        status, code = STALLED, 503
    else:
        status, code = (DEGRADED if problems else OK), 200
    return ({
        "status": status,
        "cycle": snapshot.cycle,
        "last_cycle_age_s": age,
        "backends": {b.name: {"up": b.up, "absent": b.absent, "devices": b.device_count,
                              "message": b.message} for b in snapshot.backends},
        "not_answering": problems,
        "unsupported": unsupported(snapshot),
    }, code)
