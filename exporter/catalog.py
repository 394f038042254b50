"""The metric catalog: every metric the agent publishes, defined once.

Each sink (Prometheus, OpenTelemetry, the JSON snapshot) and the generated
`docs/metrics.md` read this table; no metric name appears anywhere else in the
code. OpenTelemetry names follow the semantic conventions where one exists
(`hw.*`), a `ray.accelerator.*` namespace elsewhere. The Prometheus name is the
standard OTel-to-Prometheus translation of the OTel name and unit. How an entry
is described (kinds, scopes, ranges, `MetricSpec`) is `exporter/metric_spec.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

# How entries are described; each `X as X` is re-exported for callers (`catalog.Kind`,
# `m.SCOPE_LABELS`, `from .catalog import prometheus_name`).
from .metric_spec import BACKEND_LABELS as BACKEND_LABELS
from .metric_spec import CLOCK_CEILING_HZ as CLOCK_CEILING_HZ
from .metric_spec import DEVICE_LABELS as DEVICE_LABELS
from .metric_spec import (
    FLAG,
    MEMORY_CEILING_BYTES,
    POWER_CEILING_W,
    POWER_LIMIT_FACTOR,
    Cadence,
    MetricSpec,
    Scope,
    ValidRange,
)
from .metric_spec import LINK_LABELS as LINK_LABELS
from .metric_spec import NODE_LABELS as NODE_LABELS
from .metric_spec import PROCESS_LABELS as PROCESS_LABELS
from .metric_spec import RARE_READ_EVERY as RARE_READ_EVERY
from .metric_spec import RATIO_EPSILON as RATIO_EPSILON
from .metric_spec import RAY_LABELS as RAY_LABELS
from .metric_spec import SCOPE_LABELS as SCOPE_LABELS
from .metric_spec import SLOW_READ_INTERVAL_S as SLOW_READ_INTERVAL_S
from .metric_spec import TEMPERATURE_RANGE_CEL as TEMPERATURE_RANGE_CEL
from .metric_spec import Kind as Kind
from .metric_spec import counter as _counter
from .metric_spec import default_valid_range as default_valid_range
from .metric_spec import gauge as _gauge
from .metric_spec import info as _info
from .metric_spec import prometheus_name as prometheus_name

# Metric names, as constants so code refers to metrics without spelling them.
GPU_UTILIZATION = "hw.gpu.utilization"
MEMORY_BANDWIDTH_UTILIZATION = "ray.accelerator.memory.bandwidth.utilization"
ACTIVITY = "ray.accelerator.activity"
PIPE_ACTIVITY = "ray.accelerator.pipe.activity"
DEVICE_SPINNING = "ray.accelerator.device.spinning"
XCP_GFX_UTILIZATION = "ray.accelerator.amd.xcp.gfx.utilization"
XCP_GFX_BELOW_HOST_LIMIT = "ray.accelerator.amd.xcp.gfx.below_host_limit"
LINK_THROUGHPUT = "ray.accelerator.link.throughput"
PCIE_THROUGHPUT = "ray.accelerator.pcie.throughput"
MEMORY_USAGE = "hw.gpu.memory.usage"
MEMORY_LIMIT = "hw.gpu.memory.limit"
MEMORY_RESERVED = "ray.accelerator.memory.reserved"
POWER = "hw.power"
POWER_LIMIT = "ray.accelerator.power.limit"
ENERGY = "hw.energy"
TEMPERATURE = "hw.temperature"
CLOCK_FREQUENCY = "ray.accelerator.clock.frequency"
CLOCK_MAX_FREQUENCY = "ray.accelerator.clock.max_frequency"
THROTTLE_ACTIVE = "ray.accelerator.throttle.active"
THROTTLE_RESIDENCY = "ray.accelerator.throttle.residency"
PERFORMANCE_STATE = "ray.accelerator.performance_state"
HW_ERRORS = "hw.errors"
REMAPPED_ROWS = "ray.accelerator.memory.remapped_rows"
ROW_REMAP_PENDING = "ray.accelerator.memory.row_remap.pending"
ROW_REMAP_FAILURE = "ray.accelerator.memory.row_remap.failure"
RETIRED_PAGES = "ray.accelerator.memory.retired_pages"
RETIRED_PAGES_PENDING = "ray.accelerator.memory.retired_pages.pending"
XID_ERRORS = "ray.accelerator.xid.errors"
DEVICE_UP = "ray.accelerator.device.up"
DEVICE_SAMPLE_AGE = "ray.accelerator.device.sample.age"
SLOW_VALUES_AGE = "ray.accelerator.device.slow_values.age"
RARE_VALUES_AGE = "ray.accelerator.device.rare_values.age"
LINK_COUNTERS_AGE = "ray.accelerator.device.link_counters.age"
DEVICE_INFO = "ray.accelerator.device.info"
LINK_IO = "hw.gpu.io"
LINK_UP = "ray.accelerator.link.up"
LINK_ERRORS = "ray.accelerator.link.errors"
LINK_INFO = "ray.accelerator.link.info"
PCIE_GENERATION = "ray.accelerator.pcie.link.generation"
PCIE_WIDTH = "ray.accelerator.pcie.link.width"
TOPOLOGY = "ray.accelerator.topology.info"
FABRIC_STATE = "ray.accelerator.fabric.state"
FABRIC_STATUS = "ray.accelerator.fabric.status"
FABRIC_HEALTH_SUMMARY = "ray.accelerator.fabric.health.summary"
FABRIC_HEALTH_ISSUE = "ray.accelerator.fabric.health.issue"
FABRIC_INFO = "ray.accelerator.fabric.info"
# Values of FABRIC_STATE and FABRIC_HEALTH_SUMMARY that mean all is well (NVML's codes).
FABRIC_STATE_COMPLETED = 3
FABRIC_SUMMARY_HEALTHY = 1
NODE_PLACEMENT = "ray.accelerator.placement.info"
ALLOCATION = "ray.accelerator.allocation"
ALLOCATION_IDLE = "ray.accelerator.allocation.idle"
DEVICE_ALLOCATED = "ray.accelerator.device.allocated"
PROCESS_MEMORY_USAGE = "ray.accelerator.process.memory.usage"
PROCESS_UTILIZATION = "ray.accelerator.process.utilization"
BACKEND_UP = "ray.accelerator.backend.up"
BACKEND_DEVICES = "ray.accelerator.backend.devices"
AGENT_ERRORS = "ray.accelerator.agent.errors"
AGENT_CYCLES = "ray.accelerator.agent.cycles"
AGENT_CYCLE_DURATION = "ray.accelerator.agent.cycle.duration"
AGENT_INFO = "ray.accelerator.agent.info"
ATTRIBUTION_UP = "ray.accelerator.attribution.up"
ATTRIBUTION_AGE = "ray.accelerator.attribution.age"
ATTRIBUTION_DROPPED_LABELS = "ray.accelerator.attribution.dropped_labels"
RDT_CALL_AGE = "ray.accelerator.rdt.call.age"
TRANSFERS_IN_FLIGHT = "ray.accelerator.transfer.in_flight"
TRANSFERS_STALLED = "ray.accelerator.transfer.stalled"
TRANSFER_OLDEST_AGE = "ray.accelerator.transfer.oldest.age"
TRANSFER_ABORTS = "ray.accelerator.transfer.aborts"
TRANSFER_LISTING_AGE = "ray.accelerator.transfer.listing.age"
COLLECTIVE_SUSPECTED_STALL = "ray.accelerator.collective.suspected_stall"
# TPU-only metric names (exporter/backends/tpu)
TENSORCORE_UTILIZATION = "ray.accelerator.tensorcore.utilization"
COLLECTIVE_LATENCY = "ray.accelerator.collective.latency"
TRANSFER_LATENCY = "ray.accelerator.transfer.latency"
# Neuron-only metric names (exporter/backends/neuron)
NEURON_CORE_MEMORY_USAGE = "ray.accelerator.neuron.core.memory.usage"
NEURON_EXECUTIONS = "ray.accelerator.neuron.executions"
NEURON_EXECUTION_ERRORS = "ray.accelerator.neuron.execution.errors"
NEURON_EXECUTION_LATENCY = "ray.accelerator.neuron.execution.latency"
NEURON_RUNTIME_VCPU_UTILIZATION = "ray.accelerator.neuron.runtime.vcpu.utilization"
NEURON_RUNTIME_HOST_MEMORY = "ray.accelerator.neuron.runtime.host_memory.usage"
# Gaudi-only metric names (exporter/backends/gaudi)
GAUDI_PCIE_THROUGHPUT = PCIE_THROUGHPUT  # what the Gaudi backend reads into it

# The two ends of a transfer (Ray Direct Transport): actor, class, node and devices
# (comma-separated device UUIDs, empty where no agent of the pairing node knows them).
TRANSFER_LABELS: tuple[str, ...] = (
    "ray_job_id", "src_actor_id", "src_actor_class", "src_node_id", "src_devices",
    "dst_actor_id", "dst_actor_class", "dst_node_id", "dst_devices",
)

# Label values that backends write and sinks, boards, rules and the tab select on: spelled
# once here so that a reader and a writer of a series cannot disagree.
TASK_GENERAL = "general"  # hw.gpu.utilization{task}: the compute/graphics engines
TASK_ENCODER = "encoder"
TASK_DECODER = "decoder"
LINK_NVLINK = "nvlink"  # {link_type}
LINK_PCIE = "pcie"
LINK_XGMI = "xgmi"
LINK_ROCE = "roce"
TRANSMIT = "transmit"  # {direction}
RECEIVE = "receive"
ECC_CORRECTED = "ecc_corrected"  # hw.errors{error_type}
ECC_UNCORRECTED = "ecc_uncorrected"
ECC_DEFERRED = "ecc_deferred"  # AMD only: corrected data that could not be written back
PCIE_REPLAY = "pcie_replay"
LINK_ERROR_CRC = "crc"  # ray.accelerator.link.errors{error_type}
LINK_ERROR_REPLAY = "replay"
LINK_ERROR_RECOVERY = "recovery"
ENGINE_GRAPHICS = "graphics"  # {engine} of activity and process utilization
ENGINE_SM = "sm"
ENGINE_MEMORY = "memory"
ENGINE_ENCODER = "encoder"
ENGINE_DECODER = "decoder"
CLOCK_SM = "sm"  # {clock}: the compute clock (AMD's GFX)
CLOCK_MEMORY = "memory"
PIPE_TENSOR = "tensor"  # ray.accelerator.pipe.activity{pipe}: any tensor pipe
PCIE_CURRENT = "current"  # ray.accelerator.pcie.link.*{state}
PCIE_MAX = "max"
REASON_GPU_IDLE = "gpu_idle"  # ray.accelerator.throttle.*{reason}
REASON_SW_POWER_CAP = "sw_power_cap"
REASON_HW_SLOWDOWN = "hw_slowdown"
REASON_SW_THERMAL_SLOWDOWN = "sw_thermal_slowdown"
REASON_HW_THERMAL_SLOWDOWN = "hw_thermal_slowdown"
REASON_HW_POWER_BRAKE_SLOWDOWN = "hw_power_brake_slowdown"
# AMD's thermal limiters (amdsmi's violation status), which have no NVIDIA counterpart
REASON_SOCKET_THERMAL = "socket_thermal"
REASON_PROCHOT = "prochot"
REASON_VR_THERMAL = "vr_thermal"
REASON_HBM_THERMAL = "hbm_thermal"
# The reasons that say heat holds a device's clocks down, on any vendor.
HEAT_REASONS = (REASON_HW_THERMAL_SLOWDOWN, REASON_SW_THERMAL_SLOWDOWN, REASON_SOCKET_THERMAL,
                REASON_PROCHOT, REASON_VR_THERMAL, REASON_HBM_THERMAL)
# ... and NVIDIA's hardware slowdown, which heat, a power brake or an over-current trips.
THERMAL_THROTTLE_REASONS = (*HEAT_REASONS, REASON_HW_SLOWDOWN)
POWER_THROTTLE_REASONS = (REASON_SW_POWER_CAP, REASON_HW_POWER_BRAKE_SLOWDOWN)

CATALOG: tuple[MetricSpec, ...] = (
    # Device activity
    _gauge(GPU_UTILIZATION, "1",
           "Fraction of the last sample period during which the device's engines of the given "
           "task were busy (general: compute/graphics kernels; encoder; decoder).", "task"),
    _gauge(MEMORY_BANDWIDTH_UTILIZATION, "1",
           "Fraction of the last sample period during which device memory was being read or "
           "written."),
    _gauge(ACTIVITY, "1",
           "Fraction of the interval since the previous sample during which the given engine "
           "was active, as the device measures it (NVIDIA GPM, Hopper and newer; absent where "
           "the device does not offer it): graphics (the graphics/compute engine), sm (SMs "
           "busy), sm_occupancy (resident warps against the SMs' maximum), dram (DRAM "
           "bandwidth used against its peak). Unlike hw.gpu.utilization, one small kernel "
           "spinning does not make sm read 1.", "engine"),
    _gauge(PIPE_ACTIVITY, "1",
           "Fraction of the interval since the previous sample during which the SMs' given "
           "pipe was busy (NVIDIA GPM): tensor (any tensor operation), tensor_hmma, "
           "tensor_imma, tensor_dfma, tensor_dmma, fp64, fp32, fp16 (non-tensor math), "
           "integer.", "pipe"),
    _gauge(DEVICE_SPINNING, "",
           "1 once the device has been spinning for the whole spinning window (10 s): NVML "
           "utilization at or above 80 % while its SM and tensor activity stay at most 5 % (a "
           "kernel resident but not computing: a collective waiting on its peers, a polling "
           "loop); else 0. Only where the device measures engine activity (GPM).",
           valid=FLAG),
    _gauge(MEMORY_USAGE, "By", "Device memory in use, without the memory the driver and "
           "firmware reserve (that is its own series, ray.accelerator.memory.reserved). Ray's "
           "dashboard counts the reserved memory as used: an empty H200 reads 604 MiB in Ray "
           "and 0 B here; Ray's figure is this value plus the reserved one.",
           valid=ValidRange(0, MEMORY_CEILING_BYTES, bound_by=MEMORY_LIMIT)),
    _gauge(MEMORY_LIMIT, "By", "Total device memory.",
           valid=ValidRange(0, MEMORY_CEILING_BYTES, above_low=True)),
    _gauge(XCP_GFX_UTILIZATION, "1",
           "Share of time the given XCC (the compute complex of one accelerator die) of the "
           "given XCP (compute partition) kept its graphics/compute engine busy, as the AMD SMU "
           "reports it "
           "(amdsmi GPU metrics xcp_stats.gfx_busy_inst, MI300 and newer with ROCm 6.3+). In "
           "SPX mode XCP 0 lists every XCC of the GPU; in CPX each XCP has one. Absent where "
           "the driver or amdsmi release does not report it.", "xcp", "xcc"),
    _gauge(XCP_GFX_BELOW_HOST_LIMIT, "1",
           "Fraction of the interval since the previous sample during which the given XCC's "
           "graphics clock was held below the host's (application) clock limit, by reason: "
           "power (package power tracking), thermal, low_utilization (the firmware lowered "
           "it for lack of work), any. From the AMD SMU's accumulators over its accumulation "
           "counter (amdsmi GPU metrics 1.8, ROCm 7; 'any' also from 1.7); absent before the "
           "second sample and where not reported.", "xcp", "xcc", "reason"),
    _gauge(MEMORY_RESERVED, "By", "Device memory reserved by the driver and firmware.",
           valid=ValidRange(0, MEMORY_CEILING_BYTES, bound_by=MEMORY_LIMIT)),
    # Power, thermals, clocks
    _gauge(POWER, "W", "Power drawn by the device.",
           valid=ValidRange(0, POWER_CEILING_W, bound_by=POWER_LIMIT, factor=POWER_LIMIT_FACTOR)),
    _gauge(POWER_LIMIT, "W", "Power limit the driver enforces on the device.",
           cadence=Cadence.SLOW, valid=ValidRange(0, POWER_CEILING_W, above_low=True)),
    _counter(ENERGY, "J", "Energy consumed by the device since the driver was loaded.",
             cadence=Cadence.RARE),
    _gauge(TEMPERATURE, "Cel", "Temperature of the given sensor.", "sensor"),
    _gauge(CLOCK_FREQUENCY, "Hz", "Current clock frequency of the given clock domain.", "clock"),
    _gauge(CLOCK_MAX_FREQUENCY, "Hz", "Maximum clock frequency of the given clock domain.",
           "clock"),
    _gauge(THROTTLE_ACTIVE, "",
           "1 while the given reason is holding the device's clocks down, else 0.", "reason",
           valid=FLAG),
    _gauge(PERFORMANCE_STATE, "",
           "Performance state: 0 is the highest performance, 15 the lowest.",
           valid=ValidRange(0, 15)),
    _gauge(THROTTLE_RESIDENCY, "1",
           "Fraction of the interval since the previous sample during which the given reason "
           "held the device's clocks down (AMD: the SMU's residency accumulators over its "
           "accumulation counter, MI300 and newer: sw_power_cap (PPT), socket_thermal, "
           "prochot, vr_thermal, hbm_thermal); absent before the second sample and where not "
           "reported.", "reason"),
    # Errors and memory health
    _counter(HW_ERRORS, "{error}",
             "Hardware errors counted by the device, by type (ECC corrected/uncorrected since "
             "the driver was loaded, PCIe replays).", "error_type", cadence=Cadence.SLOW),
    _gauge(REMAPPED_ROWS, "{row}", "Memory rows remapped, by the kind of error that caused it.",
           "cause", cadence=Cadence.SLOW),
    _gauge(ROW_REMAP_PENDING, "", "1 when a row remap waits for the next device reset.",
           valid=FLAG, cadence=Cadence.SLOW),
    _gauge(ROW_REMAP_FAILURE, "", "1 when a row remap has failed; the device needs service.",
           valid=FLAG, cadence=Cadence.SLOW),
    _gauge(RETIRED_PAGES, "{page}", "Memory pages retired, by the kind of error that caused it.",
           "cause", cadence=Cadence.SLOW),
    _gauge(RETIRED_PAGES_PENDING, "", "1 when a page retirement waits for the next reset.",
           valid=FLAG, cadence=Cadence.SLOW),
    _counter(XID_ERRORS, "{event}",
             "Critical driver error events (NVIDIA XID) since the agent started, by XID code.",
             "xid"),
    # Device status
    _gauge(DEVICE_UP, "",
           "1 when the device answered the last sampling cycle, 0 when it is lost or failing."),
    _gauge(DEVICE_SAMPLE_AGE, "s", "Seconds since the device's values were last read."),
    _gauge(SLOW_VALUES_AGE, "s",
           "Seconds between the last read of the device's values marked slow cadence "
           "and the device's sample; add ray.accelerator.device.sample.age for their age now. "
           "Present where the backend reads on a cadence (NVIDIA)."),
    _gauge(RARE_VALUES_AGE, "s",
           "Seconds between the last read of the device's values marked rare cadence "
           "(energy) and the device's sample; add ray.accelerator.device.sample.age for their "
           "age now. Present where the backend reads on a cadence (NVIDIA)."),
    _gauge(LINK_COUNTERS_AGE, "s",
           "Seconds between the last read of the device's link byte counters "
           "(hw.gpu.io) of one link type (nvlink, pcie) and the device's sample; add "
           "ray.accelerator.device.sample.age for their age now. Present where the backend "
           "reads them on a schedule (NVIDIA: every cycle, or where GPM measures the links' "
           "rates each cycle, when due, PCIe's alone where their wrap needs it: see "
           "docs/backends.md).", "link_type"),
    _info(DEVICE_INFO, "Static facts about the device.",
          "pci_bus_id", "parent_uuid", "architecture", "driver_version", "serial", "numa_node",
          "cpu_affinity", "nvlink_domain", "nearest_nics"),
    # Interconnect and topology
    _counter(LINK_IO, "By",
             "Bytes the device moved over the link, by direction (transmit, receive): NVLink "
             "and XGMI per link, PCIe for the device's host link. NVIDIA GPUs whose GPM "
             "measures the links' rates read them when due, at least every slow interval "
             "(their age: ray.accelerator.device.link_counters.age). NVIDIA's 32-bit PCIe "
             "counters are absent where the wraps between two reads cannot be told (a GPU "
             "without GPM at a slow interval: docs/backends.md).", "direction",
             scope=Scope.LINK),
    _gauge(LINK_UP, "", "1 when the link is trained and active, else 0.", scope=Scope.LINK,
           valid=FLAG, cadence=Cadence.SLOW),
    _counter(LINK_ERRORS, "{error}",
             "Link-level errors, by type (crc, replay, recovery).", "error_type",
             scope=Scope.LINK, cadence=Cadence.SLOW),
    _info(LINK_INFO, "What the link connects to.",
          "version", "remote_type", "remote_pci_bus_id", "peer_uuid", scope=Scope.LINK),
    _gauge(PCIE_GENERATION, "",
           "PCIe link generation, current and the most the device and slot support; current "
           "below max under load means a downtrained link.", "state", cadence=Cadence.SLOW),
    _gauge(PCIE_WIDTH, "{lane}", "PCIe link width in lanes, current and max.", "state",
           cadence=Cadence.SLOW),
    _gauge(PCIE_THROUGHPUT, "By/s",
           "Bytes per second the device moved over its PCIe host link, by direction (transmit, "
           "receive), as the device measures it: NVIDIA GPM over the interval since the "
           "previous sample, Gaudi HLML over a 10 ms sample; where the vendor offers byte "
           "counters, hw.gpu.io on the pcie link too.", "direction"),
    _gauge(LINK_THROUGHPUT, "By/s",
           "Bytes per second the device moved over the link in the interval since the previous "
           "sample, by direction (transmit, receive), as the device measures it (NVIDIA GPM: "
           "nvlink per link, c2c per Grace-to-GPU chip-to-chip link); hw.gpu.io holds the "
           "links' byte counters.", "link_type", "link", "direction"),
    _info(TOPOLOGY,
          "How the device reaches a peer device, in the vocabulary of `nvidia-smi topo -m` "
          "(NV# for # direct or switched NVLinks, PIX, PXB, PHB, NODE, SYS), and whether "
          "peer-to-peer access works.",
          "peer_uuid", "peer_index", "connection", "p2p"),
    # NVLink fabric (NVSwitch systems: GB200/GB300 NVL72, HGX B200), read every cycle
    _gauge(FABRIC_STATE, "",
           "NVLink fabric registration state of the GPU (nvmlGpuFabricState_t): 1 not "
           "started, 2 in progress, 3 completed; absent where the GPU has no NVLink fabric.",
           valid=ValidRange(1, 3)),
    _gauge(FABRIC_STATUS, "",
           "Result of the GPU's fabric registration as an NVML return code: 0 success, "
           "anything else the error it failed with (meaningful once the state is completed).",
           valid=ValidRange(0, 999)),
    _gauge(FABRIC_HEALTH_SUMMARY, "",
           "The driver's summary of the GPU's fabric health: 1 healthy, 2 unhealthy, 3 "
           "limited capacity; absent where not reported.", valid=ValidRange(1, 3)),
    _gauge(FABRIC_HEALTH_ISSUE, "",
           "1 while the fabric health mask reports the given issue (degraded_bandwidth, "
           "route_recovery, route_unhealthy, access_timeout_recovery, "
           "incorrect_configuration, partition_unassigned, gfm_disconnected), 0 while it "
           "reports the field fine; absent where the field is not supported.", "field",
           valid=FLAG),
    _info(FABRIC_INFO,
          "The GPU's NVLink fabric: cluster UUID and clique (its NVLink domain), and the "
          "names of its state, registration status, health summary and incorrect "
          "configuration reason (none when correct).",
          "cluster_uuid", "clique_id", "state", "status", "health_summary",
          "incorrect_configuration"),
    _gauge(DEVICE_ALLOCATED, "1",
           "Fraction of the device Ray's scheduler has assigned to workers, all together."),
    # Ray workers and processes on devices
    _gauge(ALLOCATION, "1",
           "Fraction of the device Ray's scheduler assigned to the worker (1 for num_gpus=1, "
           "0.5 for num_gpus=0.5), whether or not the worker uses it.", scope=Scope.PROCESS),
    _gauge(ALLOCATION_IDLE, "",
           "1 when the worker holds the device but shows no activity on it in the last "
           "cycle (no context on the device; for a holder of the whole device that measures "
           "engine activity (GPM), graphics-engine activity below 1 %; else none of its "
           "engines busy, or where the vendor lists no processes, as on Gaudi, the device "
           "itself idle), else 0.",
           scope=Scope.PROCESS),
    _gauge(PROCESS_MEMORY_USAGE, "By", "Device memory used by the process.", scope=Scope.PROCESS,
           valid=ValidRange(0, MEMORY_CEILING_BYTES, bound_by=MEMORY_LIMIT)),
    _gauge(PROCESS_UTILIZATION, "1",
           "Fraction of the last sample period during which the process kept the given engine "
           "busy (sm, memory, encoder, decoder).", "engine", scope=Scope.PROCESS),
    # The agent itself
    _gauge(BACKEND_UP, "",
           "1 when the vendor backend's library is loaded and answering, else 0.",
           scope=Scope.BACKEND),
    _gauge(BACKEND_DEVICES, "{device}", "Devices the backend found.", scope=Scope.BACKEND),
    _counter(AGENT_ERRORS, "{error}",
             "Failed vendor calls, by backend, error kind and function; and readings the agent "
             "refused as impossible, by backend, kind (not_finite, out_of_range, over_limit, "
             "counter_decreased) and metric (in `function`): see the Valid column.",
             "backend", "kind", "function", scope=Scope.AGENT),
    _counter(AGENT_CYCLES, "{cycle}", "Sampling cycles completed.", scope=Scope.AGENT),
    _gauge(AGENT_CYCLE_DURATION, "s", "Wall time the last sampling cycle took.",
           scope=Scope.AGENT),
    _info(AGENT_INFO, "The agent's version and settings.",
          "version", "interval_seconds", "scenario", scope=Scope.AGENT),
    _info(NODE_PLACEMENT,
          "Where the node sits: cloud zone and region, rack, TPU slice, NVLink domain and node "
          "pool (Ray's ray.io/node-group, or the cloud's node pool label), from Ray node labels, "
          "the environment and the devices (NVLink fabric, TPU slice name).",
          "zone", "region", "rack", "slice", "nvlink_domain", "node_pool", scope=Scope.AGENT),
    _gauge(ATTRIBUTION_UP, "",
           "1 when the given Ray source (discovery, raylet, workers: their running tasks, "
           "state_api: task names, transfers: the pairing agent's task listing) answered "
           "the last time it was asked, else 0; while 0, series lack the labels it provides.",
           "source", scope=Scope.AGENT),
    _gauge(ATTRIBUTION_AGE, "s", "Seconds since the Ray attribution was last refreshed.",
           scope=Scope.AGENT),
    _counter(ATTRIBUTION_DROPPED_LABELS, "{value}",
             "Label values left out by the cardinality guard (e.g. task ids beyond the cap), "
             "by label.", "label", scope=Scope.AGENT),
    # Transfers (Ray Direct Transport) and collectives; see docs/transfers.md
    _gauge(RDT_CALL_AGE, "s",
           "Age of a Ray system call (`<Class>.__ray_call__`: an RDT send or receive, a "
           "collective set-up) on an actor of this node that has been running or waiting "
           "longer than the agent's report threshold: since it started when running, since "
           "it was submitted when pending. `devices` lists the UUIDs of the devices the "
           "actor holds.",
           "ray_task_id", "ray_job_id", "ray_actor_id", "actor_class", "state", "devices",
           scope=Scope.AGENT),
    _gauge(TRANSFERS_IN_FLIGHT, "{transfer}",
           "RDT transfers in flight between two actors (a send paired with its receive), "
           "stalled ones included. Exported by the agent that pairs transfers (the head "
           "node's).", *TRANSFER_LABELS, scope=Scope.AGENT),
    _gauge(TRANSFERS_STALLED, "{transfer}",
           "RDT transfers between two actors in flight for longer than the stall threshold "
           "(default 10 s; Ray kills both actors after 60 s).", *TRANSFER_LABELS,
           scope=Scope.AGENT),
    _gauge(TRANSFER_OLDEST_AGE, "s",
           "Seconds since the oldest in-flight RDT transfer between the two actors was "
           "submitted.", *TRANSFER_LABELS, scope=Scope.AGENT),
    _gauge(TRANSFER_LISTING_AGE, "s",
           "Seconds since the pairing agent listed the cluster's actor tasks, which the "
           "transfer series are as of. It lists every attribution refresh while a listing "
           "is quick, and once it is not, again after ten times a listing's own duration, "
           "30 s at most (the head converts every unfinished actor task in each).",
           scope=Scope.AGENT),
    _counter(TRANSFER_ABORTS, "{transfer}",
             "Stalled RDT transfers that ended with both actors dead (Ray aborts a transfer "
             "by killing both ends), since the agent started, by job.", "ray_job_id",
             scope=Scope.AGENT),
    _gauge(COLLECTIVE_SUSPECTED_STALL, "",
           "1 while the device has been busy (utilization at or above the busy threshold) "
           "with its interconnect byte counters (NVLink, else PCIe) flat for the whole "
           "detection window, and, where the device measures engine activity (GPM), its SM "
           "and tensor activity at most 5 %: the signature of a hung collective spinning on "
           "its peers; "
           "else 0. One series per Ray worker holding the device (empty Ray labels when "
           "none).", scope=Scope.PROCESS),
    # TPU-only metrics
    _gauge(TENSORCORE_UTILIZATION, "1",
           "Fraction of the TPU TensorCores' peak compute (matrix units) used over the last "
           "sample period; busy time alone is hw.gpu.utilization (the duty cycle)."),
    _gauge(COLLECTIVE_LATENCY, "s",
           "Given quantile of the end-to-end latency of collectives the device took part in, "
           "over the observations since the previous sample (TPU: libtpu's megascale "
           "collectives; the same on every chip its TPU process drives).", "quantile"),
    _gauge(TRANSFER_LATENCY, "s",
           "Given quantile of the latency of runtime buffer transfers over the given path "
           "(dcn_outbound, dcn_inbound, host_to_device, device_to_host), over the "
           "observations since the previous sample (TPU: libtpu's megascale transfers; the "
           "same on every chip its TPU process drives). Not Ray Direct Transport's "
           "transfers.", "path", "quantile"),
    # Neuron-only metrics
    _gauge(NEURON_CORE_MEMORY_USAGE, "By",
           "Device memory the Neuron runtimes hold for a NeuronCore, by category (constants, "
           "model_code, model_shared_scratchpad, runtime_memory, tensors).", "category"),
    _counter(NEURON_EXECUTIONS, "{execution}",
             "Model executions the Neuron runtime finished, by outcome (completed, "
             "completed_with_err, completed_with_num_err, timed_out, incorrect_input, "
             "failed_to_queue), since the agent started reading them.", "outcome",
             scope=Scope.PROCESS),
    _counter(NEURON_EXECUTION_ERRORS, "{error}",
             "Execution errors of the Neuron runtime, by type (generic, numerical, transient, "
             "model, runtime, hardware), since the agent started reading them.", "error_type",
             scope=Scope.PROCESS),
    _gauge(NEURON_EXECUTION_LATENCY, "s",
           "Given quantile (0, 0.01, 0.25, 0.5, 0.75, 0.99, 1) of the latency of the Neuron "
           "runtime's executions in the last period, by stage (total as the runtime measures "
           "it, device: on the Neuron device alone).", "stage", "quantile", scope=Scope.PROCESS),
    _gauge(NEURON_RUNTIME_VCPU_UTILIZATION, "1",
           "vCPU utilization of the Neuron runtime process in the last period, by mode (user, "
           "system), as neuron-monitor reports it.", "mode", scope=Scope.PROCESS),
    _gauge(NEURON_RUNTIME_HOST_MEMORY, "By", "Host memory the Neuron runtime process uses.",
           scope=Scope.PROCESS),
)

_BY_NAME = {spec.name: spec for spec in CATALOG}


def spec(name: str) -> MetricSpec:
    """The catalog entry for an OTel metric name; KeyError names the unknown metric."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in the catalog") from None


def iter_specs(scope: Scope | None = None) -> Iterator[MetricSpec]:
    """Catalog entries in catalog order, optionally only those of one scope."""
    return (s for s in CATALOG if scope is None or s.scope is scope)
