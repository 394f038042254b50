"""The monitoring itself: agents not scraped, backends down, stale samples and attribution."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ...promql import UP, duration, eq, matchers, metric, number
from ..cases import split, sustained
from ..config import AlertConfig
from ..fixtures import DEVICE, NO_RAY_NODE, NODE, on
from ..model import Case, Rule, Runbook, Series, Severity, held, series, steps, then, tick_for

# Agents with a Ray node, and agents without one (`--no-ray`, or before they found it).
WITH_NODE = 'ray_node_id!=""'
WITHOUT_NODE = eq("ray_node_id", "")


def rules(config: AlertConfig) -> tuple[Rule, ...]:
    """Agent health: scrape target, vendor backends, sample and attribution age."""
    return (_agent_down(config), _backend_down(config), _samples_stale(config),
            _attribution_stale(config))


def _agent_down(config: AlertConfig) -> Rule:
    t, job = config.thresholds, config.agent_job
    target = {"job": job, "instance": NODE["instance"]}
    up = f"{UP}{matchers(eq('job', job))}"

    def up_series(values: str) -> tuple[Series, ...]:
        return (Series(UP, target, values),)

    fires, near = sustained(t.agent_down_for, up_series, bad=0, good=1, near=1)
    tick = tick_for(t.agent_down_for)
    count = int(fires[0].at_s / tick)
    missing = Case("no target of the job at all", (Series(UP, {"job": "ray", "instance":
                                                               "10.0.0.7:8080"},
                                                          held(1, count)),),
                   count * tick, tick, ({"job": job},))
    return Rule(
        name="RayAcceleratorAgentDown",
        severity=Severity.CRITICAL,
        expr=f"{up} == 0 or absent({up})",
        for_s=t.agent_down_for,
        summary="ray-accel agent {{ $labels.instance }} is not being scraped",
        description="Prometheus has failed to scrape the ray-accel agent "
                    "{{ $labels.instance }} (job {{ $labels.job }}), or has no such target "
                    f"at all, for {duration(t.agent_down_for)}. Its node's accelerators "
                    "are unwatched.",
        runbook=Runbook(
            meaning="Either a target of the agents' scrape job fails (`up == 0`), or the "
                    "job has no targets at all (no agent registered, or the scrape "
                    "configuration lost them). Every other rule is blind for those nodes.",
            causes=("The agent process died or its node is down.",
                    "The agent's port is not reachable from Prometheus (firewall, "
                    "listening on 127.0.0.1 only).",
                    "Service discovery: the file written by `ray-accel deploy` / "
                    "`ray-accel sd-file` is missing or not read by Prometheus.",
                    "The job name differs: rules were generated for job "
                    f"`{job}` (`--agent-job`)."),
            checks=("Prometheus' *Targets* page for the job.",
                    "`ray-accel status` on the head: which nodes have an agent and "
                    "whether it answers.",
                    "On the node: `curl http://<agent>/healthz`."),
            tuning="Raise `agent_down_for` to tolerate restarts; generate the rules with "
                   "`--agent-job` matching your scrape job's name."),
        thresholds=("agent_down_for",),
        fires=(*fires, missing),
        near_misses=near,
    )


def _backend_down(config: AlertConfig) -> Rule:
    t, agent = config.thresholds, on(NODE, config.agent_job)
    backend = {**agent, "backend": "nvidia"}
    seen = duration(t.backend_seen_window)
    backend_tick = tick_for(t.backend_down_for)
    hold = steps(t.backend_down_for, backend_tick)
    short, length = hold // 2, hold + 6
    down = then("_x3", held(0, length - 3))
    briefly_down = then("_x3", held(1, length - 4 - short), held(0, short))

    def backend_case(why: str, devices_before: float, now_up: str, fires: bool = False) -> Case:
        """An earlier agent process (another port) ended; the current one runs `now_up`."""
        earlier = {**agent, "instance": "10.0.0.7:9479", "backend": "nvidia"}
        found = (series(m.BACKEND_UP, backend, now_up),
                 series(m.BACKEND_UP, earlier, then(held(1, 2), "stale")),
                 series(m.BACKEND_DEVICES, earlier, then(held(devices_before, 2), "stale")))
        alerts = ({"ray_node_id": agent["ray_node_id"], "backend": "nvidia"},)
        return Case(why, found, length * backend_tick, backend_tick,
                    alerts if fires else ())

    def no_ray_case(why: str, devices_before: float, fires: bool = False) -> Case:
        """Two --no-ray agents (no ray_node_id): one keeps its backend up, one's goes down."""
        other = {"job": config.agent_job, "instance": "10.0.0.9:9478", "backend": "nvidia"}
        mine = {**on(NO_RAY_NODE, config.agent_job), "backend": "nvidia"}
        found = (series(m.BACKEND_UP, mine, then(held(1, 2), held(0, length - 3))),
                 series(m.BACKEND_DEVICES, mine,
                        then(held(devices_before, 2), held(0, length - 3))),
                 series(m.BACKEND_UP, other, held(1, length)),
                 series(m.BACKEND_DEVICES, other, held(8, length)))
        alerts = ({"instance": NO_RAY_NODE["instance"], "backend": "nvidia"},)
        return Case(why, found, length * backend_tick, backend_tick, alerts if fires else ())

    return Rule(
        name="RayAcceleratorBackendDown",
        severity=Severity.CRITICAL,
        expr=f"({_backend_down_on('ray_node_id', WITH_NODE, seen)}) "
             f"or ({_backend_down_on('instance', WITHOUT_NODE, seen)})",
        for_s=t.backend_down_for,
        summary="The {{ $labels.backend }} backend of the agent on node "
                "{{ or $labels.ray_node_id $labels.instance }} is down",
        description="The agent on node "
                    "{{ or $labels.ray_node_id $labels.instance }} cannot use its "
                    "{{ $labels.backend }} vendor library, for "
                    f"{duration(t.backend_down_for)}, although it found devices with it "
                    f"within the last {duration(t.backend_seen_window)}: none of the "
                    "node's devices are reported.",
        runbook=Runbook(
            meaning="The agent runs, but the vendor library (NVML, amdsmi) is not loaded "
                    "or does not answer, on a node where it did find devices before (an "
                    "earlier agent process, within the window). An agent with a Ray node "
                    "counts with every agent process of that node (`ray_node_id`); one "
                    "without (`--no-ray`, or before it found its node) counts on its own, "
                    "by its scrape target (`instance`). The agent retries every "
                    "30 s. A backend that never found devices on the node (the AMD "
                    "backend on an NVIDIA node) is not alerted on.",
            causes=("The driver was unloaded or crashed (an upgrade in progress).",
                    "A library/driver version mismatch after an upgrade without reboot, "
                    "seen by an agent that restarted.",
                    "The agent's container lost the driver libraries or device files."),
            checks=("`curl http://<agent>/healthz` shows the backend's message.",
                    "`nvidia-smi` (or `amd-smi`) on the node.",
                    "The agent health board's *Backends up* and *Devices found* panels. A "
                    "driver that was broken since boot never found devices and is not "
                    "alerted on: look for nodes with 0 devices there."),
            tuning="Raise `backend_down_for` to cover driver upgrades; "
                   "`backend_seen_window` sets how long a node is remembered as having "
                   "had devices."),
        thresholds=("backend_down_for", "backend_seen_window"),
        fires=(backend_case("the backend found devices before, is down now", 8, down,
                            fires=True),
               no_ray_case("on one of two --no-ray agents, while the other's is up", 8,
                           fires=True)),
        near_misses=(backend_case("the backend never found devices (no such hardware)",
                                  0, down),
                     no_ray_case("a --no-ray agent's backend that never found devices, "
                                 "while another agent's did", 0),
                     backend_case(f"down for only {short * backend_tick:g}s of the "
                                  f"{t.backend_down_for:g}s needed", 8, briefly_down)),
    )


def _backend_down_on(key: str, scope: str, seen: str) -> str:
    """Backends down `by (key, backend)` among the agents `scope` selects, where one found
    devices within `seen`."""
    up, devices = metric(m.BACKEND_UP), metric(m.BACKEND_DEVICES)
    up, devices = up + matchers(scope), devices + matchers(scope)
    return (f"(max by ({key}, backend) ({up}) == 0) and on ({key}, backend) "
            f"(max by ({key}, backend) (max_over_time({devices}[{seen}])) > 0)")


def _samples_stale(config: AlertConfig) -> Rule:
    t, job = config.thresholds, config.agent_job
    return Rule(
        name="RayAcceleratorSamplesStale",
        severity=Severity.WARNING,
        expr=f"{metric(m.DEVICE_SAMPLE_AGE)} > {number(t.sample_age_seconds)}",
        for_s=t.sample_stale_for,
        summary="Values of device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} are "
                "{{ $value | printf \"%.0f\" }} s old",
        description="The agent has not read device {{ $labels.index }} "
                    "({{ $labels.uuid }}) for more than "
                    f"{t.sample_age_seconds:g} s, for {duration(t.sample_stale_for)}: its "
                    "vendor calls hang or the agent is overloaded.",
        runbook=Runbook(
            meaning="The device's last values are older than they should be. The agent "
                    "gives a device whose read is late a thread of its own, so that a hung "
                    "call stalls only that device; this alert is that stall.",
            causes=("A driver call that hangs on a sick device (often before it is lost).",
                    "A lost device (`RayAcceleratorDeviceLost` fires too): the agent keeps "
                    "exporting its counters at their last values, so their age grows.",
                    "An overloaded node: the agent gets no CPU time.",
                    "A sampling interval set longer than the threshold."),
            checks=("The agent health board: sample age per device, cycle duration, "
                    "errors by function.",
                    "`nvidia-smi` on the node: does it hang for this device too?"),
            tuning="Keep `sample_age_seconds` well above the agent's `--interval`; raise "
                   "`sample_stale_for` to ignore brief stalls."),
        thresholds=("sample_age_seconds", "sample_stale_for"),
        **split(sustained(t.sample_stale_for,
                   lambda v: (series(m.DEVICE_SAMPLE_AGE, on(DEVICE, job), v),),
                   bad=2 * t.sample_age_seconds + 1, good=1, near=t.sample_age_seconds)),
    )


def _attribution_stale(config: AlertConfig) -> Rule:
    t, agent = config.thresholds, on(NODE, config.agent_job)
    return Rule(
        name="RayAcceleratorAttributionStale",
        severity=Severity.WARNING,
        expr=f"{metric(m.ATTRIBUTION_AGE)} > {number(t.attribution_age_seconds)}",
        for_s=t.attribution_stale_for,
        summary="Ray attribution of the agent on node "
                "{{ or $labels.ray_node_id $labels.instance }} is "
                "{{ $value | printf \"%.0f\" }} s old",
        description="The agent at {{ $labels.instance }} has not refreshed which Ray "
                    f"workers hold which devices for more than {t.attribution_age_seconds:g}"
                    f" s, for {duration(t.attribution_stale_for)}: job, actor and task "
                    "labels and the allocation alerts may be out of date.",
        runbook=Runbook(
            meaning="The agent asks the raylet, its workers, the GCS and the State API who "
                    "runs on its devices; those answers are old. Series keep their last known "
                    "identities or lose them (see `ray_accelerator_attribution_up`).",
            causes=("The raylet or GCS is unreachable or overloaded.",
                    "The dashboard (State API) is down: task names go missing.",
                    "A token mismatch after the cluster's authentication token changed."),
            checks=("The agent health board: attribution up by source, attribution age.",
                    "The agent's log; `ray status` on the head."),
            tuning="Raise `attribution_age_seconds` above the agent's "
                   "`--attribution-interval` with headroom for slow GCS answers."),
        thresholds=("attribution_age_seconds", "attribution_stale_for"),
        **split(sustained(t.attribution_stale_for,
                   lambda v: (series(m.ATTRIBUTION_AGE, agent, v),),
                   bad=2 * t.attribution_age_seconds + 1, good=1,
                   near=t.attribution_age_seconds)),
    )
