"""The NVLink fabric of NVSwitch systems (GB200/GB300 NVL72, HGX B200): registration and health."""

from __future__ import annotations

from collections.abc import Callable

import pynvml

from ray_accel.exporter import catalog as m
from ray_accel.exporter.backends.nvidia.fabric_health import STATES, SUMMARIES

from ...promql import duration, metric, number
from ..cases import sustained
from ..config import AlertConfig
from ..fixtures import DEVICE, on
from ..model import (
    Case,
    Rule,
    Runbook,
    Series,
    Severity,
    held,
    last_index,
    series,
    then,
    tick_for,
)

_IN_PROGRESS, _UNHEALTHY = STATES["in_progress"], SUMMARIES["unhealthy"]


def unhealthy_fabric(select: Callable[[str], str] = metric) -> str:
    """Devices whose fabric is not registered, failed to register or is not healthy.

    `select` makes a metric's selector (the boards add their filters).
    """
    return (f"({select(m.FABRIC_STATE)} != {number(m.FABRIC_STATE_COMPLETED)}) "
            f"or ({select(m.FABRIC_STATUS)} != 0) "
            f"or ({select(m.FABRIC_HEALTH_SUMMARY)} != {number(m.FABRIC_SUMMARY_HEALTHY)})")


def rules(config: AlertConfig) -> tuple[Rule, ...]:
    """One rule: a fabric that is not registered, failed to register, or is not healthy."""
    return (_fabric_unhealthy(config),)


def _fabric_unhealthy(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)

    def fabric(summary_values: str, state_value: float = m.FABRIC_STATE_COMPLETED,
               status_value: float = 0) -> tuple[Series, ...]:
        """The summary following the timeline; state and status held."""
        count = last_index(summary_values)
        return (series(m.FABRIC_HEALTH_SUMMARY, device, summary_values),
                series(m.FABRIC_STATE, device, held(state_value, count)),
                series(m.FABRIC_STATUS, device, held(status_value, count)))

    fires, near = sustained(t.fabric_unhealthy_for, fabric, bad=_UNHEALTHY,
                            good=m.FABRIC_SUMMARY_HEALTHY, near=m.FABRIC_SUMMARY_HEALTHY)
    tick = tick_for(t.fabric_unhealthy_for)
    count = int(fires[0].at_s / tick)

    def registering(state_value: float, status_value: float) -> tuple[Series, ...]:
        # No summary while registration runs (the driver reports NOT_SUPPORTED then).
        return (series(m.FABRIC_STATE, device, held(state_value, count)),
                series(m.FABRIC_STATUS, device, held(status_value, count)))

    # In progress (no summary yet) for the first half, completed and healthy since.
    first = count // 2
    just_registered = (
        series(m.FABRIC_STATE, device, then(held(_IN_PROGRESS, first - 1),
                                            held(m.FABRIC_STATE_COMPLETED, count - first))),
        series(m.FABRIC_STATUS, device, then(held(pynvml.NVML_ERROR_NOT_READY, first - 1),
                                             held(0, count - first))),
        series(m.FABRIC_HEALTH_SUMMARY, device,
               then(f"_x{first}", held(m.FABRIC_SUMMARY_HEALTHY, count - first))),
    )

    def case(why: str, found: tuple[Series, ...], fire: bool) -> Case:
        return Case(why, found, count * tick, tick, (dict(found[0].labels),) if fire else ())

    return Rule(
        name="RayAcceleratorFabricUnhealthy",
        severity=Severity.CRITICAL,
        expr=unhealthy_fabric(),
        for_s=t.fabric_unhealthy_for,
        summary="NVLink fabric of device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} "
                "is not healthy",
        description="Device {{ $labels.index }} ({{ $labels.uuid }}) has, for "
                    f"{duration(t.fabric_unhealthy_for)}, not completed its NVLink fabric "
                    "registration, failed it, or reported a fabric health summary other than "
                    "healthy. Work spanning its NVLink domain (multi-node NVLink across the "
                    "rack's trays) runs slower or fails.",
        runbook=Runbook(
            meaning="On NVSwitch systems (GB200/GB300 NVL72 racks, HGX B200) every GPU "
                    "registers with the fabric manager before it can reach its peers over "
                    "NVLink. A GPU whose registration is not `completed`, whose registration "
                    "status is an error, or whose health summary is `unhealthy` or "
                    "`limited_capacity` has lost some or all of its NVLink bandwidth to the "
                    "rest of its domain: collectives across trays slow down or hang.",
            causes=("Fabric manager (or NVLink Subnet Manager on NVL72) not running, "
                    "restarting or disconnected (`gfm_disconnected`).",
                    "Failed or degraded NVLink cables, cartridges or NVSwitch trays "
                    "(`degraded_bandwidth`, `route_unhealthy`, `route_recovery`).",
                    "A wrong configuration: a tray in the wrong slot, mismatched GPU "
                    "firmware, too few NVLinks trained, no partition assigned "
                    "(`incorrect_configuration` with its reason, `partition_unassigned`).",
                    "A GPU reset or driver reload still in progress (state `in_progress`)."),
            checks=("The device health board's *NVLink fabric* table: state, status, summary "
                    "and which health fields report trouble, per device; are all GPUs of a "
                    "tray (node) or of the whole domain affected?",
                    "`ray_accelerator_fabric_health_issue == 1` and "
                    "`ray_accelerator_fabric_info` for the field and the incorrect "
                    "configuration reason.",
                    "`nvidia-smi -q | grep -A 12 Fabric` on the node; the fabric manager's "
                    "(`systemctl status nvidia-fabricmanager`) or NVLSM's logs; the NVSwitch "
                    "trays' health in the rack management controller."),
            tuning="Raise `fabric_unhealthy_for` to ride out registration after GPU resets "
                   "and node reboots. A GPU without an NVLink fabric has none of these series "
                   "and never fires."),
        thresholds=("fabric_unhealthy_for",),
        fires=(*fires,
               case("registration still in progress past the rule's for",
                    registering(_IN_PROGRESS, pynvml.NVML_ERROR_NOT_READY), fire=True),
               case("registration completed with an error status",
                    registering(m.FABRIC_STATE_COMPLETED, pynvml.NVML_ERROR_UNKNOWN), fire=True)),
        near_misses=(*near, case("registering for a while, then completed and healthy",
                                 just_registered, fire=False)),
    )
