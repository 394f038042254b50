"""Generates `docs/metrics.md` from the metric catalog."""

from __future__ import annotations

from .catalog import (
    CATALOG,
    RARE_READ_EVERY,
    SCOPE_LABELS,
    SLOW_READ_INTERVAL_S,
    Cadence,
    Kind,
    MetricSpec,
    Scope,
)

_SCOPE_TITLES = {
    Scope.DEVICE: "Device metrics",
    Scope.LINK: "Interconnect link metrics",
    Scope.PROCESS: "Process and Ray worker metrics",
    Scope.BACKEND: "Backend metrics",
    Scope.AGENT: "Agent metrics",
}

_HEADER = """\
# Metric catalog

Generated from `exporter/catalog.py` by `make docs` (`ray-accel catalog`); do not edit by hand.

Every metric has one OpenTelemetry name and unit; its Prometheus name is the
standard translation (dots to underscores, the unit as a suffix, `_ratio` for
dimensionless 0-1 gauges, `_total` on counters, `_info` on metadata series).
Values are in base units. A value the hardware cannot report is absent, never 0.

The Valid column gives the values the metric can truly take. A reading a
backend returns outside it, NaN or infinite, or a counter that went backwards without
a reset is not exported: it is counted in `ray_accelerator_agent_errors_total`
(kind `out_of_range`, `over_limit`, `not_finite` or `counter_decreased`, the
metric in `function`), named in the device's `errors` in the JSON snapshot and
logged once per device and metric (see docs/reliability.md). Ratios may exceed
1 by 1e-6 (rounding); a bound by another metric (`<= hw.gpu.memory.limit`)
compares readings of the same device sample.

Labels every series carries on top of those listed:
- `ray_node_id`, the Ray node the agent runs on, once it has found one, and
  `SessionName`, the Ray session, named as on Ray's own series so that Ray's
  Grafana variables filter ours too;
- `simulated="true"` when the agent runs on simulated hardware;
- any `--node-label NAME=VALUE` given to the agent.

Process metrics and the allocation metrics share one label set, so they join
in PromQL: the device's labels, then `pid` and the Ray worker's identity
(`ray_job_id`, `ray_worker_id`, `ray_actor_id`, `actor_class`, `actor_name`,
and `ray_task_id`/`task_name` of the task it runs now). The Ray labels are
empty for a process that is not a Ray worker. At most 1000 distinct
`ray_task_id` values per node per 10 minutes are exported (`--task-id-cap`);
beyond that `ray_task_id` is empty, `task_name` stays, and the dropped values
are counted in `ray_accelerator_attribution_dropped_labels_total`.

Metrics marked *slow cadence* are read less often where the backend reads on a
cadence (NVIDIA): every `--slow-read-interval` seconds (default {slow:g} s), each
device at its own point of that interval so that no cycle reads them all, and
their last values exported in between. How old they are is
`ray_accelerator_device_slow_values_age_seconds` (at the sample) plus
`ray_accelerator_device_sample_age_seconds`. Metrics marked *rare cadence* (the energy
counter, whose read costs a real H200's driver about 5 ms of CPU) are read the same way
every {rare:g} s ({every} slow intervals), their age in
`ray_accelerator_device_rare_values_age_seconds`. Everything else is read every cycle.
"""


def _row(spec: MetricSpec) -> str:
    labels = ", ".join(f"`{name}`" for name in spec.labels) or "-"
    unit = spec.unit or "-"
    kind = "info" if spec.kind is Kind.INFO else spec.kind.value
    valid = "-" if spec.kind is Kind.INFO else spec.valid_range.describe()
    if spec.kind is Kind.COUNTER:
        valid += ", never decreasing"
    description = spec.description
    if spec.cadence is not Cadence.CYCLE:
        description += f" *{spec.cadence.value.capitalize()} cadence.*"
    return (f"| `{spec.prometheus_name}` | `{spec.name}` | {kind} | {unit} | {labels} | "
            f"{valid} | {description} |")


def render_markdown() -> str:
    """The whole catalog document."""
    parts = [_HEADER.format(slow=SLOW_READ_INTERVAL_S, every=RARE_READ_EVERY,
                            rare=SLOW_READ_INTERVAL_S * RARE_READ_EVERY)]
    for scope, title in _SCOPE_TITLES.items():
        specs = [s for s in CATALOG if s.scope is scope]
        common = ", ".join(f"`{n}`" for n in SCOPE_LABELS[scope]) or "none"
        parts.append(f"\n## {title}\n\nCommon labels: {common}.\n\n"
                     "| Prometheus | OpenTelemetry | Type | Unit | Labels | Valid | Description |\n"
                     "|---|---|---|---|---|---|---|\n")
        parts.append("\n".join(_row(s) for s in specs) + "\n")
    return "".join(parts)
