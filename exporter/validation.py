"""Every reading checked against its metric's valid range, in one place.

Drivers do return impossible values (firmware bugs, sentinels, a negative
reading wrapped through an unsigned integer). The sampler hands each device
sample a backend takes to `ReadingValidator.check` before anything else sees
it; a reading that cannot be true is dropped from the sample (so no sink
exports it), named in the sample's `errors` (so the JSON snapshot says why it
is absent), counted in the backend's error tally (exported as
`ray_accelerator_agent_errors_total{backend, kind, function=<metric>}`) and
logged once per device and metric.

First, a reading must be one the catalog describes (a third-party backend's
mistake must not reach the sinks): a metric the catalog lacks is
`unknown_metric`; a label the metric does not have, a label value that is not
a string, or a reading of a device metric on a link (or of a link metric on the
device, ...) is `bad_labels`.

The ranges come from the catalog (`MetricSpec.valid_range`). On top of them:
- no value may be NaN or infinite (kind `not_finite`);
- a value outside its metric's range is `out_of_range`;
- a value above the reading of the same device sample that bounds it (memory
  used above memory total, power above twice the power limit) is `over_limit`;
  a bounding reading that is itself invalid (a memory total or power limit
  must be above 0) or absent bounds nothing, and the metric's own range still
  applies;
- a counter must not decrease (`counter_decreased`): the lower reading is
  dropped and the last exported value stands. A device sample that comes back
  down (lost, reset, the driver reloading) is the reset signal: after it a
  counter may start again from anywhere. A counter that keeps counting from a
  lower value for `RESET_CONFIRM_SAMPLES` samples in a row is taken as a reset
  the agent was not told of, and exported from there. A process's counters
  are forgotten when the process leaves the device's list (its pid may be
  reused by one that counts from zero).
"""

from __future__ import annotations

import logging
import math
import operator
import sys
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter

from . import catalog as m
from .backends.base import ErrorTally
from .model import DeviceSample, Link, ProcessSample, Reading

log = logging.getLogger(__name__)

RESET_CONFIRM_SAMPLES = 3

NOT_FINITE = "not_finite"
OUT_OF_RANGE = "out_of_range"
OVER_LIMIT = "over_limit"
COUNTER_DECREASED = "counter_decreased"
UNKNOWN_METRIC = "unknown_metric"
BAD_LABELS = "bad_labels"

# Metrics whose reading bounds another metric's of the same device sample.
_BOUNDING = frozenset(s.valid_range.bound_by for s in m.CATALOG if s.valid_range.bound_by)
# Each catalog metric's valid range, read once: the check runs on every reading.
_RANGES = {s.name: s.valid_range for s in m.CATALOG}
_COUNTERS = frozenset(s.name for s in m.CATALOG if s.kind is m.Kind.COUNTER)
# Each catalog metric's scope and own label names, for the check that the catalog knows it.
_SHAPES = {s.name: (s.scope.value, frozenset(s.labels)) for s in m.CATALOG}
_NUMBERS = (float, int)
_METRIC, _LABELS, _VALUE = attrgetter("metric"), attrgetter("labels"), attrgetter("value")


@dataclass(frozen=True, slots=True)
class _Rule:
    """A catalog metric's checks as plain values, for the common case of a reading that
    passes them all (`_SampleCheck.keep`); any other reading takes the full checks."""

    scope: str
    own: frozenset[str]
    low: float  # the most negative float where the range has no low end
    high: float
    bound_by: str | None
    factor: float
    counter: bool


_RULES = {s.name: _Rule(s.scope.value, frozenset(s.labels),
                        -sys.float_info.max if s.valid_range.low is None
                        else s.valid_range.least,
                        sys.float_info.max if s.valid_range.high is None
                        else s.valid_range.high,
                        s.valid_range.bound_by, s.valid_range.factor,
                        s.kind is m.Kind.COUNTER)
          for s in m.CATALOG}


@dataclass(frozen=True, slots=True)
class Violation:
    """Why one reading was refused: its metric, the kind of violation and what was wrong."""

    metric: str
    kind: str
    detail: str


def range_violation(reading: Reading, limits: Mapping[str, float]) -> Violation | None:
    """What is wrong with a reading's value on its own (None when it can be true).

    `limits` holds the valid values of the bounding metrics in the same sample.
    A metric unknown to the catalog is only checked for being a finite number.
    """
    value = reading.value
    try:
        finite = math.isfinite(value)
    except TypeError:
        return Violation(reading.metric, NOT_FINITE, f"{value!r} is not a number")
    if not finite:
        return Violation(reading.metric, NOT_FINITE, f"{value!r} is not a finite number")
    valid = _RANGES.get(reading.metric)
    if valid is None:
        return None
    least = valid.least
    if (least is not None and value < least) or (
            valid.high is not None and value > valid.high):
        return Violation(reading.metric, OUT_OF_RANGE,
                         f"{value:g} is outside its valid range ({valid.describe()})")
    limit = limits.get(valid.bound_by or "")
    if limit is not None and value > valid.factor * limit:
        factor = f"{valid.factor:g} x " if valid.factor != 1 else ""
        return Violation(reading.metric, OVER_LIMIT,
                         f"{value:g} is above {factor}{valid.bound_by} ({limit:g})")
    return None


def catalog_violation(reading: Reading, scope: str) -> Violation | None:
    """Why the catalog cannot describe a reading found at `scope` ("device", "link",
    "process"); None when it can."""
    shape = _SHAPES.get(reading.metric)
    if shape is None:
        return Violation(reading.metric, UNKNOWN_METRIC, "no metric of the catalog has this name")
    metric_scope, own = shape
    if metric_scope != scope:
        return Violation(reading.metric, BAD_LABELS,
                         f"a {metric_scope} metric read as one of the {scope}")
    for name, value in reading.labels:
        if name not in own:
            return Violation(reading.metric, BAD_LABELS,
                             f"label {name!r} is not one of its labels {sorted(own)}")
        if type(value) is not str:
            return Violation(reading.metric, BAD_LABELS,
                             f"label {name!r} has the value {value!r}, not a string")
    return None


def _limits(readings: Iterable[Reading]) -> dict[str, float]:
    limits: dict[str, float] = {}
    for reading in readings:
        if (reading.metric in _BOUNDING and reading.metric not in limits
                and range_violation(reading, {}) is None):
            limits[reading.metric] = reading.value
    return limits


CounterKey = tuple[Hashable, ...]
_DEVICE: CounterKey = ("device",)  # where a device's own readings are


def _counter_key(where: CounterKey, metric: str, labels: tuple) -> CounterKey:
    """Where a counter's history is kept: its place, metric and labels."""
    return (*where, metric, labels)


@dataclass
class _CounterHistory:
    """A counter's last exported value, and the run of lower readings seen since."""

    exported: float
    lower_run: int = 0
    last_lower: float = -math.inf

    def accepts(self, value: float) -> bool:
        """Whether `value` may be exported after what was; False for a decrease (kept in mind)."""
        if value >= self.exported:
            self.exported, self.lower_run = value, 0
            return True
        self.lower_run = self.lower_run + 1 if value >= self.last_lower else 1
        self.last_lower = value
        if self.lower_run >= RESET_CONFIRM_SAMPLES:
            self.exported, self.lower_run = value, 0
            return True
        return False


@dataclass(frozen=True, slots=True)
class _Passed:
    """A run of readings (one tuple) that passed every check, and what the checks used.

    The same tuple again (a backend hands back the readings it did not read again, links'
    byte counters most cycles) passes again as long as the bounds and counter tracking are
    the same and the device's counter history has not been cleared (that drops these):
    its counters are at these values already, so checking them again would change nothing.
    """

    readings: tuple[Reading, ...] | tuple[Link, ...]
    limits: Mapping[str, float]
    track_counters: bool

    def holds_for(self, readings: tuple[Reading, ...] | tuple[Link, ...],
                  check: _SampleCheck) -> bool:
        """Whether `readings` are these, checked under the same bounds and counter tracking."""
        return (self.readings is readings and self.track_counters == check.track_counters
                and self.limits == check.limits)


@dataclass(frozen=True, slots=True)
class _Layout:
    """The metrics and labels of a run of readings the catalog describes, and their rules:
    each position's valid range, the positions a reading of the sample bounds and the
    counters' positions, each with its key in the counter history."""

    metrics: tuple[str, ...]
    labels: tuple[tuple, ...]
    rules: tuple[_Rule, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    bounded: tuple[tuple[int, str, float], ...]  # (position, bounding metric, factor)
    counters: tuple[tuple[int, CounterKey], ...]  # (position, counter history key)
    bounding: tuple[int, ...]  # the positions of readings whose metric bounds others

    def limits(self, readings: tuple[Reading, ...]) -> dict[str, float]:
        """`_limits(readings)` of readings in this layout, from the bounding positions only."""
        return _limits(map(readings.__getitem__, self.bounding))


def _layout(metrics: tuple[str, ...], labels: tuple[tuple, ...], rules: tuple[_Rule, ...],
            where: CounterKey) -> _Layout:
    """The layout of readings at `where` with these metrics, labels and (catalog) rules."""
    return _Layout(
        metrics, labels, rules, tuple(rule.low for rule in rules),
        tuple(rule.high for rule in rules),
        tuple((position, rule.bound_by, rule.factor) for position, rule in enumerate(rules)
              if rule.bound_by is not None),
        tuple((position, _counter_key(where, metrics[position], labels[position]))
              for position, rule in enumerate(rules) if rule.counter),
        tuple(position for position, metric in enumerate(metrics) if metric in _BOUNDING))


def _fitting_rule(reading: Reading, scope: str) -> _Rule | None:
    """The reading's catalog rule if the catalog describes it at `scope`, else None."""
    rule = _RULES.get(reading.metric)
    if rule is None or rule.scope != scope:
        return None
    for name, label in reading.labels:
        if name not in rule.own or type(label) is not str:
            return None
    return rule


@dataclass
class _DeviceChecks:
    """What the validator remembers of one device: its counters and what it has logged."""

    counters: dict[CounterKey, _CounterHistory] = field(default_factory=dict)
    logged: set[str] = field(default_factory=set)
    passed: dict[CounterKey, _Passed] = field(default_factory=dict)  # by where they are
    layouts: dict[CounterKey, _Layout] = field(default_factory=dict)  # by where they are
    # The last links tuple whose every link passed, as for `_Passed` (a backend hands back
    # the same tuple while none of its links was read again).
    links_passed: _Passed | None = None

    def forget_counters(self) -> None:
        """A lost or reset device: its counters may start again from anywhere."""
        self.counters.clear()
        self.passed.clear()
        self.links_passed = None

    def counter_accepts(self, key: CounterKey, value: float) -> bool:
        history = self.counters.get(key)
        if history is None:
            self.counters[key] = _CounterHistory(value)
            return True
        return history.accepts(value)

    def forget_processes_except(self, pids: set[int]) -> None:
        for table in (self.counters, self.passed, self.layouts):
            for key in [k for k in table if k[0] == "process" and k[1] not in pids]:
                del table[key]

    def layout_of(self, readings: tuple[Reading, ...],
                  where: CounterKey) -> tuple[_Layout | None, tuple[_Rule | None, ...]]:
        """The layout of `readings` where the catalog describes every one of them at `where`
        (its metric, its scope and its labels), else None; and each reading's rule (None
        where the catalog does not describe it). Looked up again only when the metrics or
        labels there are not those of the last readings there that the catalog described."""
        metrics, labels = tuple(map(_METRIC, readings)), tuple(map(_LABELS, readings))
        layout = self.layouts.get(where)
        if layout is not None and layout.metrics == metrics and layout.labels == labels:
            return layout, layout.rules
        rules = tuple(_fitting_rule(reading, where[0]) for reading in readings)
        if None in rules:
            return None, rules
        layout = self.layouts[where] = _layout(metrics, labels, rules, where)
        return layout, rules


@dataclass
class _SampleCheck:
    """One sample's check: its bounding values, its device's memory, what it refused."""

    device: _DeviceChecks
    limits: Mapping[str, float]
    track_counters: bool
    found: list[Violation] = field(default_factory=list)

    def keep(self, readings: tuple[Reading, ...], where: CounterKey,
             layout_of: tuple[_Layout | None, tuple[_Rule | None, ...]] | None = None
             ) -> tuple[Reading, ...]:
        """The readings that can be true (`readings` itself when all can); `layout_of`, when
        given, is the device's `layout_of(readings, where)`."""
        passed = self.device.passed.get(where)
        if passed is not None and passed.holds_for(readings, self):
            return readings
        layout, rules = layout_of or self.device.layout_of(readings, where)
        kept = None if layout is None else self._kept_in_layout(readings, layout)
        if kept is None:
            kept = self._kept_one_by_one(readings, rules, where)
        if kept is readings:
            self.device.passed[where] = _Passed(readings, self.limits, self.track_counters)
        else:
            self.device.passed.pop(where, None)
        return kept

    def _kept_in_layout(self, readings: tuple[Reading, ...],
                        layout: _Layout) -> tuple[Reading, ...] | None:
        """The readings kept, their values checked against the layout's ranges and bounds all
        at once (`readings` itself when all are kept); None when some value is not a finite
        number within them, for the one-by-one checks to say which (no counter checked yet:
        those keep a history)."""
        values = tuple(map(_VALUE, readings))
        try:  # NaN fails both comparisons; a value that is not a number cannot be compared
            if not (all(map(operator.le, layout.lows, values))
                    and all(map(operator.le, values, layout.highs))):
                return None
        except TypeError:
            return None
        limits = self.limits
        for position, bound_by, factor in layout.bounded:
            limit = limits.get(bound_by)
            if limit is not None and values[position] > factor * limit:
                return None
        if not self.track_counters:
            return readings
        refused = {position for position, key in layout.counters
                   if not self._counter_accepts(readings[position], key)}
        if not refused:
            return readings
        return tuple(r for position, r in enumerate(readings) if position not in refused)

    def _kept_one_by_one(self, readings: tuple[Reading, ...], rules: tuple[_Rule | None, ...],
                         where: CounterKey) -> tuple[Reading, ...]:
        """The readings that can be true (`readings` itself when all can), checked in turn."""
        limits = self.limits
        kept: list[Reading] | None = None  # made at the first reading refused
        for position, (reading, rule) in enumerate(zip(readings, rules, strict=True)):
            # The common case inline (it runs on every reading of a run where one value failed,
            # each cycle while a device keeps answering it): a reading the catalog describes
            # here (`rule`), a finite value within its bounds.
            value = reading.value
            if (rule is not None and type(value) in _NUMBERS and rule.low <= value <= rule.high
                    and (rule.bound_by is None or rule.bound_by not in limits
                         or value <= rule.factor * limits[rule.bound_by])):
                accepted = (not rule.counter or not self.track_counters
                            or self._counter_accepts(
                                reading, _counter_key(where, reading.metric, reading.labels)))
            else:
                accepted = self._accepts(reading, where)
            if not accepted and kept is None:
                kept = list(readings[:position])
            elif accepted and kept is not None:
                kept.append(reading)
        return readings if kept is None else tuple(kept)

    def links(self, links: tuple[Link, ...]) -> tuple[Link, ...]:
        """The links with only the readings that can be true (`links` itself when all can)."""
        passed = self.device.links_passed
        if passed is not None and passed.holds_for(links, self):
            return links
        kept = tuple(self.link(link) for link in links)
        if all(map(operator.is_, kept, links)):
            self.device.links_passed = _Passed(links, self.limits, self.track_counters)
            return links
        self.device.links_passed = None
        return kept

    def link(self, link: Link) -> Link:
        readings = self.keep(link.readings, ("link", link.link_type, link.index))
        return link if readings is link.readings else replace(link, readings=readings)

    def process(self, process: ProcessSample) -> ProcessSample:
        readings = self.keep(process.readings, ("process", process.pid))
        return process if readings is process.readings else replace(process, readings=readings)

    def _accepts(self, reading: Reading, where: CounterKey) -> bool:
        """Every check of one reading; a refusal is kept in `found`."""
        violation = catalog_violation(reading, where[0]) or range_violation(reading, self.limits)
        if violation is not None:
            self.found.append(violation)
            return False
        if self.track_counters and reading.metric in _COUNTERS:
            key = _counter_key(where, reading.metric, reading.labels)
            return self._counter_accepts(reading, key)
        return True

    def _counter_accepts(self, reading: Reading, key: CounterKey) -> bool:
        """Whether a valid counter reading may follow its last exported value (kept in the
        device's counter history under `key`)."""
        if self.device.counter_accepts(key, reading.value):
            return True
        self.found.append(Violation(
            reading.metric, COUNTER_DECREASED,
            f"{reading.value:g} is below its last value "
            f"{self.device.counters[key].exported:g} without a reset"))
        return False


class ReadingValidator:
    """Checks each device sample of one backend; keeps per-device counter history.

    Used from one thread (the sampler's). `tally` counts refused readings by
    (kind, metric name); `backend` names the backend in the log.
    """

    def __init__(self, tally: ErrorTally, backend: str = "") -> None:
        self._tally = tally
        self._backend = backend
        self._devices: dict[str, _DeviceChecks] = {}

    def check(self, sample: DeviceSample) -> DeviceSample:
        """`sample` without the readings that cannot be true, those named in its `errors`."""
        device = self._devices.setdefault(sample.device.uuid, _DeviceChecks())
        if not sample.up:
            device.forget_counters()  # lost or reset: its counters may start again from zero
        layout, rules = device.layout_of(sample.readings, _DEVICE)
        limits = _limits(sample.readings) if layout is None else layout.limits(sample.readings)
        check = _SampleCheck(device, limits, track_counters=sample.up)
        readings = check.keep(sample.readings, _DEVICE, (layout, rules))
        links = check.links(sample.links)
        processes = tuple(check.process(p) for p in sample.processes)
        if sample.up:
            device.forget_processes_except({p.pid for p in sample.processes})
        if not check.found:
            return sample
        for violation in check.found:
            self._report(sample, device, violation)
        return replace(sample, readings=readings, links=links, processes=processes,
                       errors={**sample.errors, **_reasons(check.found)})

    def _report(self, sample: DeviceSample, device: _DeviceChecks, violation: Violation) -> None:
        self._tally.count(violation.kind, violation.metric)
        if violation.metric in device.logged:
            return
        device.logged.add(violation.metric)
        log.warning(
            "%s device %s (%s): dropped a %s reading: %s (%s); further refused readings of it "
            "are counted in ray_accelerator_agent_errors_total, not logged",
            self._backend or "backend", sample.device.index, sample.device.uuid,
            violation.metric, violation.detail, violation.kind)


def _reasons(found: Iterable[Violation]) -> dict[str, str]:
    """Why each refused metric is absent, as the snapshot's `errors` give it: every reason
    of a metric refused more than once (two sensors' temperatures), joined by "; "."""
    reasons: dict[str, list[str]] = {}
    for violation in found:
        reason = f"{violation.kind}: {violation.detail}"
        if reason not in reasons.setdefault(violation.metric, []):
            reasons[violation.metric].append(reason)
    return {metric: "; ".join(each) for metric, each in reasons.items()}
