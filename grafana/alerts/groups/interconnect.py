"""Interconnect faults: downtrained PCIe links, NVLink/XGMI links down or erring."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ...promql import duration, eq, matchers, metric, number
from ..cases import Subject, dropping, increased, split, sustained
from ..config import AlertConfig
from ..fixtures import DEVICE, LINK, on
from ..label_values import CURRENT, GENERAL, MAX
from ..model import Case, Rule, Runbook, Series, Severity, held, last_index, series, tick_for


def rules(config: AlertConfig) -> tuple[Rule, ...]:
    """PCIe link state first, then the NVLink/XGMI links."""
    return (_pcie_width_downtrained(config), _pcie_generation_downtrained(config),
            _link_down(config), _link_errors(config))


def _pcie(device: dict[str, str], name: str, maximum: float, busy: float = 0.9) -> Subject:
    """PCIe link state `name` following the timeline, its maximum, the device `busy`."""
    def build(values: str) -> tuple[Series, ...]:
        count = last_index(values)
        return (series(name, device, values, state=CURRENT),
                series(name, device, held(maximum, count), state=MAX),
                series(m.GPU_UTILIZATION, device, held(busy, count), task=GENERAL))
    return build


def _pcie_width_downtrained(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    width = metric(m.PCIE_WIDTH)
    return Rule(
        name="RayAcceleratorPcieWidthDowntrained",
        severity=Severity.WARNING,
        expr=f"{width}{matchers(eq('state', CURRENT))} < ignoring(state) "
             f"{width}{matchers(eq('state', MAX))}",
        for_s=t.pcie_downtrained_for,
        summary="PCIe link of device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} "
                "runs at x{{ $value | printf \"%.0f\" }}, below its maximum width",
        description="The PCIe link of device {{ $labels.index }} ({{ $labels.uuid }}) has "
                    "trained to fewer lanes than it and its slot support, for "
                    f"{duration(t.pcie_downtrained_for)}; host transfers are slower.",
        runbook=Runbook(
            meaning="The link negotiated fewer lanes than both ends support. Width does "
                    "not drop to save power, so a narrow link is a fault: copies between "
                    "host and device (data loading, checkpointing, CPU offload) slow down "
                    "in proportion.",
            causes=("A badly seated card or riser, a damaged connector or cable.",
                    "Signal-integrity problems that made the link retrain (see PCIe "
                    "replays on the device health board).",
                    "A BIOS lane bifurcation setting."),
            checks=("The interconnect board's *PCIe link state* table: current vs max "
                    "generation and width for every device.",
                    "`nvidia-smi -q -d PCIE -i <index>`; `lspci -vv -s <bus id>` "
                    "(LnkSta vs LnkCap)."),
            tuning="Raise `pcie_downtrained_for` if links retrain briefly after resets. "
                   "A persistently narrow link needs hardware service."),
        thresholds=("pcie_downtrained_for",),
        **split(dropping(sustained(t.pcie_downtrained_for, _pcie(device, m.PCIE_WIDTH, 16),
                                   bad=8, good=16, near=16), "state")),
    )


def _pcie_generation_downtrained(config: AlertConfig) -> Rule:
    t, device = config.thresholds, on(DEVICE, config.agent_job)
    generation = metric(m.PCIE_GENERATION)
    utilization = f"{metric(m.GPU_UTILIZATION)}{matchers(eq('task', GENERAL))}"
    gen_fires, gen_near = dropping(sustained(t.pcie_downtrained_for,
                                             _pcie(device, m.PCIE_GENERATION, 5),
                                             bad=4, good=5, near=5), "state")
    tick = tick_for(t.pcie_downtrained_for)
    count = int(gen_fires[0].at_s / tick)
    return Rule(
        name="RayAcceleratorPcieGenerationDowntrained",
        severity=Severity.WARNING,
        expr=f"({generation}{matchers(eq('state', CURRENT))} < ignoring(state) "
             f"{generation}{matchers(eq('state', MAX))}) "
             f"and ignoring(state, task) "
             f"({utilization} > {number(t.pcie_busy_utilization)})",
        for_s=t.pcie_downtrained_for,
        summary="PCIe link of device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }} "
                "runs at Gen{{ $value | printf \"%.0f\" }} while busy, below its maximum",
        description="The PCIe link of device {{ $labels.index }} ({{ $labels.uuid }}) has "
                    "run below its maximum generation while the device was busy, for "
                    f"{duration(t.pcie_downtrained_for)}.",
        runbook=Runbook(
            meaning="Devices drop to a lower PCIe generation when idle to save power and "
                    "return to the maximum under load. A busy device that stays at a "
                    "lower generation has a link that cannot train to full speed.",
            causes=("Signal-integrity problems (risers, retimers, cables).",
                    "A slot or BIOS setting limiting the generation.",
                    "Firmware that failed to retrain after a reset."),
            checks=("The interconnect board's *PCIe link state* table.",
                    "`nvidia-smi -q -d PCIE -i <index>`, `lspci -vv -s <bus id>`; PCIe "
                    "replays on the device health board."),
            tuning="Raise `pcie_busy_utilization` if light load does not make your "
                   "devices train up; raise `pcie_downtrained_for` to ignore brief dips."),
        thresholds=("pcie_busy_utilization", "pcie_downtrained_for"),
        fires=gen_fires,
        near_misses=(*gen_near, Case(
            "at a lower generation, but idle", _pcie(device, m.PCIE_GENERATION, 5, busy=0)(
                held(4, count)), count * tick, tick)),
    )


def _link_down(config: AlertConfig) -> Rule:
    t, link = config.thresholds, on(LINK, config.agent_job)
    return Rule(
        name="RayAcceleratorLinkDown",
        severity=Severity.WARNING,
        expr=f"{metric(m.LINK_UP)} == 0",
        for_s=t.link_down_for,
        summary="{{ $labels.link_type }} link {{ $labels.link }} of device {{ $labels.index }} "
                "on node {{ or $labels.ray_node_id $labels.instance }} is down",
        description="Link {{ $labels.link }} ({{ $labels.link_type }}) of device "
                    "{{ $labels.index }} ({{ $labels.uuid }}) has not been active for "
                    f"{duration(t.link_down_for)}. Traffic to its peers uses fewer links, "
                    "or falls back to PCIe.",
        runbook=Runbook(
            meaning="An interconnect link (NVLink, XGMI) that exists on the device is not "
                    "trained. Collective operations that use it lose bandwidth, and "
                    "peer-to-peer traffic may fall back to PCIe.",
            causes=("A failed link, NVSwitch port or bridge.",
                    "The Fabric Manager not running or failed (on NVSwitch systems "
                    "every link is down then).",
                    "A device reset that left links untrained."),
            checks=("The interconnect board: link state per link, link errors, and the "
                    "topology table.",
                    "`nvidia-smi nvlink --status -i <index>`; `systemctl status "
                    "nvidia-fabricmanager`."),
            tuning="Raise `link_down_for` to ride out resets; silence by `uuid` and "
                   "`link` for a link known to be disabled."),
        thresholds=("link_down_for",),
        **split(sustained(t.link_down_for, lambda v: (series(m.LINK_UP, link, v),),
                          bad=0, good=1)),
    )


def _link_errors(config: AlertConfig) -> Rule:
    t, link = config.thresholds, on(LINK, config.agent_job)
    burst = t.link_error_burst
    return Rule(
        name="RayAcceleratorLinkErrors",
        severity=Severity.WARNING,
        expr=f"increase({metric(m.LINK_ERRORS)}[{duration(t.link_error_window)}]) "
             f"> {number(burst)}",
        for_s=0,
        summary="Burst of {{ $labels.error_type }} errors on {{ $labels.link_type }} link "
                "{{ $labels.link }} of device {{ $labels.index }} on node "
                "{{ or $labels.ray_node_id $labels.instance }}",
        description=f"More than {burst:g} {{{{ $labels.error_type }}}} errors within "
                    f"{duration(t.link_error_window)} on link {{{{ $labels.link }}}} of "
                    "device {{ $labels.index }} ({{ $labels.uuid }}).",
        runbook=Runbook(
            meaning="The link retransmits (replay), recovers or detects corrupted flits "
                    "(CRC) at a high rate. A few errors are normal; a burst means a "
                    "marginal link that costs bandwidth and may go down.",
            causes=("A degraded connector, cable or NVSwitch port.",
                    "Thermal stress on the link's components."),
            checks=("The interconnect board's *Link errors* panel for the link and its "
                    "neighbours, and the bandwidth on the link.",
                    "`nvidia-smi nvlink -e -i <index>` for the error counters."),
            tuning="Raise `link_error_burst` (errors per window) or `link_error_window` "
                   "if your links report steady low rates."),
        thresholds=("link_error_window", "link_error_burst"),
        **split(increased(t.link_error_window,
                   lambda v: (series(m.LINK_ERRORS, link, v, error_type=m.LINK_ERROR_REPLAY),),
                   start=5, jump=2 * burst + 1, small_jump=burst / 2)),
    )
