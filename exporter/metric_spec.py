"""How a metric is described: the terms every catalog entry is written in.

Kinds, read cadences and scopes (a scope decides the labels every series of it
carries), the OTel-to-Prometheus name translation, valid ranges and the
`MetricSpec` record with its builders. The entries themselves are in
`exporter/catalog.py`, which re-exports these names.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass


class Kind(enum.Enum):
    """How a metric's value behaves over time."""

    GAUGE = "gauge"
    COUNTER = "counter"
    INFO = "info"


class Cadence(enum.Enum):
    """How often a backend that reads on a cadence (NVIDIA today) reads a metric.

    CYCLE: every sampling cycle (what the judgements need: utilization, activity,
    memory, power, temperature, clocks, throttling, link bytes). SLOW: every
    `--slow-read-interval` seconds (`SLOW_READ_INTERVAL_S` by default), each device
    at its own point of that interval, and the last values exported in between
    with their age (`ray.accelerator.device.slow_values.age`): counters whose rate
    Prometheus computes, error counts and board state that change rarely (the PCIe
    link's current generation and width). RARE: every
    `RARE_READ_EVERY` slow intervals (30 s by default), the same way, with their own
    age (`ray.accelerator.device.rare_values.age`): the energy counter, whose read costs
    a real H200's driver about 5 ms of CPU.
    """

    CYCLE = "cycle"
    SLOW = "slow"
    RARE = "rare"


SLOW_READ_INTERVAL_S = 10.0
# The rare cadence's interval, in slow intervals: 30 s by default, DCGM-exporter's default
# collection interval, and short enough that `rate()` over a minute sees two reads.
RARE_READ_EVERY = 3


class Scope(enum.Enum):
    """What one series of a metric describes; decides its common labels."""

    DEVICE = "device"
    LINK = "link"
    PROCESS = "process"
    BACKEND = "backend"
    AGENT = "agent"


# Labels every series of a scope carries, before the metric's own labels.
DEVICE_LABELS: tuple[str, ...] = ("vendor", "model", "index", "uuid")
# A process or Ray worker on a device: who it is in Ray's terms (empty when not Ray's).
RAY_LABELS: tuple[str, ...] = (
    "pid", "ray_job_id", "ray_worker_id", "ray_actor_id", "actor_class", "actor_name",
    "ray_task_id", "task_name",
)
PROCESS_LABELS: tuple[str, ...] = (*DEVICE_LABELS, *RAY_LABELS)
# One interconnect link of a device: NVLink or XGMI link number, or "0" for PCIe.
LINK_LABELS: tuple[str, ...] = (*DEVICE_LABELS, "link_type", "link")
# Labels the agent puts on every series of the node (besides --node-label ones).
NODE_LABELS: tuple[str, ...] = ("ray_node_id", "SessionName", "simulated")
BACKEND_LABELS: tuple[str, ...] = ("backend",)
SCOPE_LABELS: dict[Scope, tuple[str, ...]] = {
    Scope.DEVICE: DEVICE_LABELS,
    Scope.LINK: LINK_LABELS,
    Scope.PROCESS: PROCESS_LABELS,
    Scope.BACKEND: BACKEND_LABELS,
    Scope.AGENT: (),
}

# UCUM unit -> Prometheus suffix, per the OpenTelemetry compatibility specification.
_UNIT_SUFFIXES = {
    "s": "seconds",
    "By": "bytes",
    "By/s": "bytes_per_second",
    "W": "watts",
    "J": "joules",
    "Cel": "celsius",
    "Hz": "hertz",
}
_ANNOTATION = re.compile(r"\{[^}]*\}")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9:]+")


def prometheus_name(otel_name: str, unit: str, kind: Kind) -> str:
    """Translate an OTel metric name and unit to the Prometheus sample name.

    Dots become underscores, the unit becomes a suffix (`By` -> `_bytes`, a
    dimensionless `1` gauge -> `_ratio`, `{annotations}` are dropped), counters
    end in `_total`.
    """
    name = _INVALID_NAME_CHARS.sub("_", otel_name)
    unit = _ANNOTATION.sub("", unit)
    if unit == "1":
        suffix = "ratio" if kind is Kind.GAUGE else ""
    else:
        suffix = _UNIT_SUFFIXES.get(unit, _INVALID_NAME_CHARS.sub("_", unit).strip("_"))
    if suffix and not name.endswith(f"_{suffix}"):
        name = f"{name}_{suffix}"
    if kind is Kind.COUNTER:
        name = f"{name}_total"
    return name


# Valid ranges (exporter/validation.py drops a reading outside its metric's range).
RATIO_EPSILON = 1e-6  # ratios computed from percents may exceed 1 by rounding only
POWER_CEILING_W = 5000.0  # above any single accelerator's draw (B200 ~1.2 kW, MI355X 1.4 kW)
POWER_LIMIT_FACTOR = 2.0  # power above twice the device's enforced limit cannot be true
TEMPERATURE_RANGE_CEL = (-40.0, 150.0)  # what on-die and memory sensors can report
CLOCK_CEILING_HZ = 50e9  # above any core or memory clock (GDDR7 reports ~15 GHz)
# above any one device's memory (MI355X 288 GB; a GH200's unified memory is under 1 TB)
MEMORY_CEILING_BYTES = float(2**44)


@dataclass(frozen=True, slots=True)
class ValidRange:
    """The values a metric's reading can truly take.

    `low`/`high` bound the value (None: unbounded on that side); with `above_low`
    the value must be greater than `low` (a memory total or power limit of 0 is no
    limit a device has). `bound_by` names a device metric of the same sample that
    caps it (`value <= factor * that reading`, e.g. memory used <= memory total).
    Every value must be finite and a counter must never decrease (see
    exporter/validation.py).
    """

    low: float | None = 0.0
    high: float | None = None
    bound_by: str | None = None
    factor: float = 1.0
    above_low: bool = False

    @property
    def least(self) -> float | None:
        """The least value in the range (the float just above `low` where `above_low`)."""
        if self.low is None or not self.above_low:
            return self.low
        return math.nextafter(self.low, math.inf)

    def describe(self) -> str:
        """The range as docs and logs state it, e.g. `0 to 1` or `>= 0, <= 2 x hw.power.limit`."""
        if self.low is not None and self.high is not None and not self.above_low:
            parts = [f"{self.low:g} to {self.high:g}"]
        elif self.low is not None:
            parts = [f"{'>' if self.above_low else '>='} {self.low:g}"]
            if self.high is not None:
                parts.append(f"<= {self.high:g}")
        elif self.high is not None:
            parts = [f"<= {self.high:g}"]
        else:
            parts = ["any finite value"]
        if self.bound_by:
            factor = f"{self.factor:g} x " if self.factor != 1 else ""
            parts.append(f"<= {factor}{self.bound_by}")
        return ", ".join(parts)


FLAG = ValidRange(0, 1)
POSITIVE = ValidRange(0, above_low=True)


def default_valid_range(unit: str, kind: Kind) -> ValidRange:
    """The range a metric of this unit and kind has unless its catalog entry says otherwise."""
    if unit == "1" and kind is Kind.GAUGE:
        return ValidRange(0, 1 + RATIO_EPSILON)
    if unit == "Cel":
        return ValidRange(*TEMPERATURE_RANGE_CEL)
    if unit == "W":
        return ValidRange(0, POWER_CEILING_W)
    if unit == "Hz":
        return ValidRange(0, CLOCK_CEILING_HZ)
    # bytes, joules, seconds, counts of things ({error}, {row}, ...), levels: never negative
    return ValidRange(0)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its OTel identity, how it translates, and what it means.

    `valid` overrides the range its unit and kind give (`valid_range`).
    """

    name: str
    kind: Kind
    unit: str
    scope: Scope
    description: str
    labels: tuple[str, ...] = ()
    valid: ValidRange | None = None
    cadence: Cadence = Cadence.CYCLE

    @property
    def valid_range(self) -> ValidRange:
        """The values a reading of this metric can truly take."""
        return self.valid or default_valid_range(self.unit, self.kind)

    @property
    def prometheus_name(self) -> str:
        """The sample name in Prometheus exposition (with `_total` on counters)."""
        return prometheus_name(self.name, self.unit, self.kind)

    @property
    def prometheus_family(self) -> str:
        """The family name `prometheus_client` expects (without `_total` or `_info`)."""
        name = self.prometheus_name
        if self.kind is Kind.COUNTER:
            return name.removesuffix("_total")
        if self.kind is Kind.INFO:
            return name.removesuffix("_info")
        return name

    @property
    def prometheus_unit(self) -> str:
        """The OpenMetrics UNIT metadata, empty where the suffix is not a unit."""
        unit = _ANNOTATION.sub("", self.unit)
        if unit == "1" and self.kind is Kind.GAUGE:
            return "ratio"
        return _UNIT_SUFFIXES.get(unit, "")

    @property
    def all_labels(self) -> tuple[str, ...]:
        """Scope labels followed by the metric's own labels (node labels come on top)."""
        return (*SCOPE_LABELS[self.scope], *self.labels)


def gauge(name: str, unit: str, description: str, *labels: str, scope: Scope = Scope.DEVICE,
          valid: ValidRange | None = None, cadence: Cadence = Cadence.CYCLE) -> MetricSpec:
    """A gauge's entry: `labels` are the metric's own, after its scope's."""
    return MetricSpec(name, Kind.GAUGE, unit, scope, description, labels, valid, cadence)


def counter(name: str, unit: str, description: str, *labels: str, scope: Scope = Scope.DEVICE,
            valid: ValidRange | None = None, cadence: Cadence = Cadence.CYCLE) -> MetricSpec:
    """A counter's entry (its Prometheus name ends in `_total`)."""
    return MetricSpec(name, Kind.COUNTER, unit, scope, description, labels, valid, cadence)


def info(name: str, description: str, *labels: str, scope: Scope = Scope.DEVICE,
         cadence: Cadence = Cadence.CYCLE) -> MetricSpec:
    """An info metric's entry: its value is 1, its labels carry the facts."""
    return MetricSpec(name, Kind.INFO, "", scope, description, labels, cadence=cadence)
