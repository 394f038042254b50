"""The alert rules: what each watches, how urgent it is, what to do about it.

Rules are built from a `Thresholds` (and the Prometheus job the agents are
scraped under), so every number in them is tunable. Each rule carries its
promtool cases: where it must fire and the near misses where it must not.
One module per rule group under `groups/`, one builder per rule.
"""

from __future__ import annotations

from .config import DEFAULT_AGENT_JOB, AlertConfig
from .groups import activity, agent, allocation, device_health, fabric, interconnect, transfers
from .label_values import POWER_REASONS, THERMAL_REASONS
from .model import Group, Rule

__all__ = ["DEFAULT_AGENT_JOB", "POWER_REASONS", "THERMAL_REASONS", "AlertConfig",
           "all_rules", "groups", "transfer_rules"]

transfer_rules = transfers.rules


def groups(config: AlertConfig | None = None) -> tuple[Group, ...]:
    """Every rule group, in the order the rules file lists them."""
    config = config or AlertConfig()
    found = (
        Group("ray-accel.allocation", allocation.rules(config)),
        Group("ray-accel.activity", activity.rules(config)),
        Group("ray-accel.device-health", device_health.rules(config)),
        Group("ray-accel.interconnect", interconnect.rules(config)),
        Group("ray-accel.fabric", fabric.rules(config)),
        Group("ray-accel.agent", agent.rules(config)),
        Group("ray-accel.transfers", transfers.rules(config)),
    )
    return tuple(g for g in found if g.rules)


def all_rules(config: AlertConfig | None = None) -> tuple[Rule, ...]:
    """Every rule of every group."""
    return tuple(rule for group in groups(config) for rule in group.rules)
