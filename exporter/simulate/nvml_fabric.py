"""A simulated GPU's NVLink fabric: the scenario's `fabric` object, checked and rendered.

State, registration status, health mask and health summary are step signals:
a constant, or {"keyframes": [[t, value], ...], "period_s": p} holding each
value from its time on, so fabric health can change mid-run. Values may be
given by name: a state ("COMPLETED"), an NVML return code ("SUCCESS",
"NOT_READY"), a summary ("HEALTHY") and a health mask as an integer or as
{field: value} with the names of the binding's `NVML_GPU_FABRIC_HEALTH_MASK_*`
constants ({"degraded_bw": "true", "incorrect_configuration": "none"}).
`max_version` 2 plays a driver that knows only the v2 struct (no summary).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..backends.nvidia import fabric_health
from . import checks
from .nvml_vocabulary import FABRIC_STATES, error_code

_KEYS = ("cluster_uuid", "clique_id", "state", "status", "health_mask", "health_summary",
         "max_version")
_SIGNAL_KEYS = ("keyframes", "period_s", "interpolate")


def _health_mask(value: Any, path: str) -> int:
    if isinstance(value, Mapping):
        try:
            return fabric_health.encode(value)
        except KeyError as error:
            raise checks.fail(path, error.args[0]) from None
    return checks.integer(value, path, hi=2**32 - 1)


def _health_summary(value: Any, path: str) -> int:
    if isinstance(value, str):
        return checks.enum(value, path, fabric_health.SUMMARIES, "fabric health summary")
    return checks.integer(value, path, hi=255)


# Scenario key -> (default, the code of one value).
_VALUES: dict[str, tuple[Any, Callable[[Any, str], int]]] = {
    "state": ("COMPLETED", lambda v, p: checks.enum(v, p, FABRIC_STATES, "fabric state")),
    "status": (0, lambda v, p: error_code(v, p, allow_success=True)),
    "health_mask": (0, _health_mask),
    "health_summary": (0, _health_summary),
}


def _is_signal(value: Any) -> bool:
    return isinstance(value, Mapping) and "keyframes" in value


def _step_signal(value: Any, path: str, code: Callable[[Any, str], int]) -> str:
    """A step signal of coded values, checked, as the state file writes a signal."""
    if not _is_signal(value):
        return str(code(value, path))
    checks.keys(value, path, _SIGNAL_KEYS, required=("keyframes",))
    if value.get("interpolate", "step") != "step":
        raise checks.fail(f"{path}.interpolate", 'fabric values change in steps: use "step"')
    frames = checks.sequence(value["keyframes"], f"{path}.keyframes")
    coded = []
    for i, frame in enumerate(frames):
        where = f"{path}.keyframes[{i}]"
        if isinstance(frame, str) or not isinstance(frame, list | tuple) or len(frame) != 2:
            raise checks.fail(where, f"expected a [t, value] pair, got {checks.describe(frame)}")
        coded.append([frame[0], code(frame[1], f"{where}[1]")])
    numeric = {**value, "keyframes": coded, "interpolate": "step"}
    checks.signal(numeric, path)  # times, order and period
    period = value.get("period_s") or 0
    points = " ".join(f"{t!r} {v}" for t, v in coded)
    return f"k step {period!r} {len(coded)} {points}"


def check_fabric(value: Any, path: str) -> None:
    """Checks a device's `fabric` object."""
    fabric_line(value, path)


def fabric_line(value: Any, path: str = "fabric") -> str:
    """The state file's `fabric` line for a device's `fabric` object (checked)."""
    fabric = checks.mapping(value, path)
    checks.keys(fabric, path, _KEYS)
    uuid = fabric.get("cluster_uuid", "0" * 8 + "-0000-0000-0000-" + "0" * 12)
    checks.string(uuid, f"{path}.cluster_uuid")
    if not checks.PLAIN_UUID.match(uuid):
        raise checks.fail(f"{path}.cluster_uuid", "expected a UUID (8-4-4-4-12 hex digits)")
    clique = checks.integer(fabric.get("clique_id", 0), f"{path}.clique_id", hi=2**32 - 1)
    state, status, mask, summary = (
        _step_signal(fabric.get(key, default), f"{path}.{key}", code)
        for key, (default, code) in _VALUES.items()
    )
    version = checks.integer(fabric.get("max_version", 3), f"{path}.max_version", lo=2, hi=3)
    older = " v2" if version == 2 else ""  # a driver without the v3 struct (health summary)
    return (f"fabric {state} {status} {clique} {mask} {summary} "
            f"{uuid.replace('-', '').lower()}{older}")
