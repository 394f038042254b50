"""The NVLink fabric's health mask and summary, as NVML lays them out (no NVML calls here).

`nvmlDeviceGetGpuFabricInfoV` (v3) returns a 32-bit `healthMask` of small
fields and a `healthSummary`. The bit layout and the value names are taken from
the binding's `NVML_GPU_FABRIC_HEALTH_MASK_*` / `NVML_GPU_FABRIC_HEALTH_SUMMARY_*`
constants, so a new binding's values are picked up by name. The simulated
hardware encodes scenario masks with the same table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import pynvml

_MASK = "NVML_GPU_FABRIC_HEALTH_MASK_"
_SUMMARY = "NVML_GPU_FABRIC_HEALTH_SUMMARY_"


def _named(prefix: str) -> Mapping[str, int]:
    """{lower-case value name: code} of the binding's constants starting with `prefix`."""
    return MappingProxyType({name.removeprefix(prefix).lower(): getattr(pynvml, name)
                             for name in dir(pynvml) if name.startswith(prefix)})


@dataclass(frozen=True)
class HealthField:
    """One field of the health mask.

    `issue` is the exported `field` label: the trouble the field reports when
    one of its `trouble` values is set (the metric is 1 then, 0 for a `fine`
    value, absent for NOT_SUPPORTED or a value NVML does not define).
    `nvml` is the field's name in the binding's constants and in scenarios.
    """

    issue: str
    nvml: str
    shift: int
    width: int
    values: Mapping[str, int]
    trouble: frozenset[int]
    fine: frozenset[int]

    def code(self, mask: int) -> int:
        """This field's value in `mask`."""
        return (mask >> self.shift) & self.width


def _field(issue: str, nvml: str, trouble: tuple[str, ...], fine: tuple[str, ...]) -> HealthField:
    values = _named(f"{_MASK}{nvml}_")
    return HealthField(issue=issue, nvml=nvml.lower(),
                       shift=getattr(pynvml, f"{_MASK}SHIFT_{nvml}"),
                       width=getattr(pynvml, f"{_MASK}WIDTH_{nvml}"), values=values,
                       trouble=frozenset(values[v] for v in trouble),
                       fine=frozenset(values[v] for v in fine))


_CONFIGURATION = _named(f"{_MASK}INCORRECT_CONFIGURATION_")
#: Every field of the mask, in bit order.
HEALTH_FIELDS: tuple[HealthField, ...] = (
    _field("degraded_bandwidth", "DEGRADED_BW", ("true",), ("false",)),
    _field("route_recovery", "ROUTE_RECOVERY", ("true",), ("false",)),
    _field("route_unhealthy", "ROUTE_UNHEALTHY", ("true",), ("false",)),
    _field("access_timeout_recovery", "ACCESS_TIMEOUT_RECOVERY", ("true",), ("false",)),
    _field("incorrect_configuration", "INCORRECT_CONFIGURATION",
           tuple(n for n in _CONFIGURATION if n not in ("not_supported", "none")), ("none",)),
    _field("partition_unassigned", "PARTITION_ASSIGNED", ("false",), ("true",)),
    _field("gfm_disconnected", "GFM_STATE", ("disconnected",), ("connected",)),
)
INCORRECT_CONFIGURATION = HEALTH_FIELDS[4]

#: Health summary names -> codes: not_supported, healthy, unhealthy, limited_capacity.
SUMMARIES = _named(_SUMMARY)
SUMMARY_NOT_SUPPORTED = SUMMARIES["not_supported"]
SUMMARY_HEALTHY = SUMMARIES["healthy"]

#: Fabric states (nvmlGpuFabricState_t): not_supported, not_started, in_progress, completed.
STATES = _named("NVML_GPU_FABRIC_STATE_")
STATE_NOT_SUPPORTED = STATES["not_supported"]
STATE_COMPLETED = STATES["completed"]


def issues(mask: int) -> Iterator[tuple[HealthField, int]]:
    """(field, 1 or 0) for each field of `mask` that reports a defined value."""
    for field in HEALTH_FIELDS:
        code = field.code(mask)
        if code in field.trouble:
            yield field, 1
        elif code in field.fine:
            yield field, 0


def encode(values: Mapping[str, str]) -> int:
    """A health mask from {field's NVML name: value name}, e.g. {"degraded_bw": "true"}.

    Fields not given are NOT_SUPPORTED (0). Raises KeyError naming an unknown
    field or value.
    """
    by_name = {f.nvml: f for f in HEALTH_FIELDS}
    mask = 0
    for name, value in values.items():
        field = by_name.get(name)
        if field is None:
            raise KeyError(f"unknown health mask field {name!r} (known: {', '.join(by_name)})")
        code = field.values.get(str(value).lower())
        if code is None:
            raise KeyError(f"unknown value {value!r} of {name} (known: {', '.join(field.values)})")
        mask |= code << field.shift
    return mask
