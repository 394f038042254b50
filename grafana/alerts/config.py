"""What the alert rules depend on: their thresholds and the agents' scrape job."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..thresholds import Thresholds

DEFAULT_AGENT_JOB = "ray-accel"


@dataclass(frozen=True)
class AlertConfig:
    """Everything the rules depend on."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    agent_job: str = DEFAULT_AGENT_JOB
