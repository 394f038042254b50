"""Renders docs/alerts.md: how to load the rules, the thresholds, and a runbook per rule."""

from __future__ import annotations

from ..promql import duration
from ..thresholds import describe
from .model import Group
from .rules_file import anchor

INTRO = """\
# Alert rules

Generated from `grafana/alerts/groups/` (one module per rule group) by `make grafana`
(`ray-accel grafana`); do not edit by hand. Each rule's `runbook_url` points at its section below.

## Loading the rules

`ray-accel grafana --out DIR` writes `DIR/prometheus/ray-accel-alerts.yml`
(the committed copy with default thresholds is
`grafana/generated/prometheus/ray-accel-alerts.yml`). Add it to Prometheus:

```yaml
rule_files:
  - /etc/prometheus/ray-accel-alerts.yml
```

The rules expect the agents' series as they publish them (labels kept:
`honor_labels: true`, see `deploy/prometheus/prometheus.yml`) and the agents'
scrape job to be named `{job}` (change with `--agent-job`). Next to the rules,
`ray-accel-alerts.*.test.yml` hold promtool unit tests (one file per evaluation
interval): `promtool test rules ray-accel-alerts.*.test.yml`.

Every alert carries a `severity` label (`critical`, `warning`, `info`) and the
annotations `summary`, `description` and `runbook_url`; the device's and the
Ray worker's labels (`ray_node_id`, `index`, `uuid`, `pid`, `ray_actor_id`, ...)
come from the series, so Alertmanager can route and silence on them. To
silence one device, match on `uuid`; one node, on `ray_node_id` (an agent run
with `--no-ray` has none: match on `instance`, which the summaries then name as
the node); one kind of actor, on `actor_class`.

## Recording rules

`DIR/prometheus/ray-accel-recording.yml` (committed:
`grafana/generated/prometheus/ray-accel-recording.yml`) is one group,
`ray_accel_cluster_recording`, evaluated every 10 s (the scrape interval of
`deploy/prometheus/prometheus.yml`), that records the cluster aggregates the
Accelerators tab shows, `by (SessionName, ray_io_cluster)`: general-engine
utilization as its sum and count (`ray_accel_cluster:hw_gpu_utilization_ratio:sum`,
`:count`: a mean over several sessions or clusters is their sums over their counts),
device memory in use and power (`:sum`, over top-level devices, `index!~".+/.+"`: a MIG
instance's, AMD partition's or NeuronCore's are in its device's figures and are not
counted again; device counts take every device), idle allocations weighted by their share
(`ray_accel_cluster:ray_accelerator_allocation_idle:sum`) and devices down
(`ray_accel_cluster:ray_accelerator_device_up:count_down`); the last two are 0, not
absent, where devices report and none is idle or down. Load it beside the alert rules:

```yaml
rule_files:
  - /etc/prometheus/ray-accel-alerts.yml
  - /etc/prometheus/ray-accel-recording.yml
```

The tab's cluster history over 6 h, 24 h and 7 d then reads these few series
instead of every device's (docs/api.md, `recorded`), from the moment the rules
are loaded. `promtool test rules ray-accel-recording.test.yml` checks each
recorded series against its devices' aggregate.

## Thresholds

Change them with `ray-accel grafana --alert-threshold NAME=VALUE` (repeatable) or
`--thresholds FILE` (a YAML mapping; `grafana/generated/prometheus/alert-thresholds.yml`
lists every one). Durations take Prometheus syntax (`15m`, `90s`); ratios are 0-1.

| Threshold | Default | Meaning |
|---|---|---|
"""


def _bullets(items: tuple[str, ...]) -> str:
    return "\n".join(f"- {item}" for item in items)


def render(groups: tuple[Group, ...], job: str) -> str:
    """The whole of docs/alerts.md."""
    parts = [INTRO.format(job=job)]
    parts.append("\n".join(f"| `{name}` | `{default}` | {help_text} |"
                           for name, _, default, help_text in describe()))
    parts.append("\n\n## Rules\n\n| Alert | Severity | Group |\n|---|---|---|\n")
    parts.append("\n".join(f"| [{rule.name}](#{anchor(rule)}) | {rule.severity.value} | "
                           f"{group.name} |" for group in groups for rule in group.rules))
    for group in groups:
        for rule in group.rules:
            held = f" for `{duration(rule.for_s)}`" if rule.for_s else ""
            knobs = ", ".join(f"`{n}`" for n in rule.thresholds) or "none"
            parts.append(
                f"\n\n## {rule.name}\n\n"
                f"**Severity:** {rule.severity.value}. **Fires when** the expression below "
                f"holds{held}. **Thresholds:** {knobs}.\n\n"
                f"```promql\n{rule.expr}\n```\n\n"
                f"**What it means.** {rule.runbook.meaning}\n\n"
                f"**Likely causes.**\n\n{_bullets(rule.runbook.causes)}\n\n"
                f"**What to check.**\n\n{_bullets(rule.runbook.checks)}\n\n"
                f"**Silence or tune.** {rule.runbook.tuning}")
    return "".join(parts) + "\n"
