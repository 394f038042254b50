"""What a device's activity says, defined once: idle, computing, or spinning.

NVML's utilization is the share of time *any* kernel ran: one small kernel
spinning in a loop (a collective waiting on its peers) reads 100 %. Where the
device measures engine activity (NVIDIA GPM, Hopper and newer), the judgements
use it instead:

- idle: graphics-engine activity below `IDLE_ACTIVITY` (Datadog's definition of
  an idle GPU is graphics activity 0); without activity, NVML utilization 0;
- computing: SM or tensor activity above `SPIN_ACTIVITY`;
- spinning: utilization at or above `BUSY_UTILIZATION` while SM and tensor
  activity both stay at or below `SPIN_ACTIVITY`, for `SPIN_WINDOW_S` in a row
  (`SpinningWindow`; `ActivityView.spinning` is the instant's figure).

`ActivityView.rule` says which rule judged a device: `activity` or
`utilization`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import catalog as m
from .model import DeviceSample, Reading

IDLE_ACTIVITY = 0.01
SPIN_ACTIVITY = 0.05
BUSY_UTILIZATION = 0.8
SPIN_WINDOW_S = 10.0
RULE_ACTIVITY = "activity"
RULE_UTILIZATION = "utilization"


@dataclass(frozen=True, slots=True)
class ActivityView:
    """The figures the judgements read from one device sample (None: not reported)."""

    utilization: float | None = None
    graphics: float | None = None
    sm: float | None = None
    tensor: float | None = None

    @property
    def rule(self) -> str:
        """Which rule judges this device idle: engine activity where measured, else utilization."""
        return RULE_ACTIVITY if self.graphics is not None else RULE_UTILIZATION

    @property
    def idle(self) -> bool | None:
        """Whether the device did nothing in the last interval; None when nothing says."""
        if self.graphics is not None:
            return self.graphics < IDLE_ACTIVITY
        if self.utilization is not None:
            return self.utilization <= 0
        return None

    @property
    def computing(self) -> bool | None:
        """Whether its SMs or tensor pipes really work; None without engine activity."""
        if self.sm is None:
            return None
        return self.sm > SPIN_ACTIVITY or (self.tensor or 0.0) > SPIN_ACTIVITY

    @property
    def spinning(self) -> bool | None:
        """Busy by NVML's utilization while not computing; None where either is unknown."""
        computing = self.computing
        if computing is None or self.utilization is None:
            return None
        return self.utilization >= BUSY_UTILIZATION and not computing


class SpinningWindow:
    """Since when one device has been spinning; the verdict once that lasted `window_s`."""

    def __init__(self, window_s: float = SPIN_WINDOW_S) -> None:
        self.window_s = window_s
        self._since: float | None = None

    def update(self, view: ActivityView, now: float) -> bool | None:
        """This cycle's verdict; None (and a fresh start) where the figures cannot tell."""
        spinning = view.spinning
        if not spinning:
            self._since = None
            return spinning
        if self._since is None:
            self._since = now
        return now - self._since >= self.window_s


def activity_of(sample: DeviceSample) -> ActivityView:
    """The utilization and engine activity figures of a sample."""
    return view_of(sample.readings)


def view_of(readings: Iterable[Reading]) -> ActivityView:
    """The utilization and engine activity figures among a device's readings."""
    found: dict[str, float] = {}
    for reading in readings:
        if reading.metric == m.GPU_UTILIZATION and reading.labels == (("task", m.TASK_GENERAL),):
            found["utilization"] = reading.value
        elif reading.metric == m.ACTIVITY and reading.labels in _ENGINES:
            found[_ENGINES[reading.labels]] = reading.value
        elif reading.metric == m.PIPE_ACTIVITY and reading.labels == (("pipe", m.PIPE_TENSOR),):
            found["tensor"] = reading.value
    return ActivityView(**found)


_ENGINES = {(("engine", engine),): engine for engine in (m.ENGINE_GRAPHICS, m.ENGINE_SM)}
