"""What a per-node agent is started with: `AgentConfig` and its defaults."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .attribution.guard import DEFAULT_TASK_ID_CAP
from .attribution.transfers import DEFAULT_REPORT_AFTER_S, DEFAULT_STALL_AFTER_S
from .catalog import SLOW_READ_INTERVAL_S
from .collective import DEFAULT_BUSY_UTILIZATION, DEFAULT_FLAT_BYTES_PER_S, DEFAULT_WINDOW_S
from .exposure import ExposureSettings
from .serving import ServingLimits

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9478
DEFAULT_INTERVAL_S = 1.0


@dataclass
class AgentConfig:
    """Everything the agent is started with."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    interval_s: float = DEFAULT_INTERVAL_S
    # How often slow-cadence values are read (catalog.Cadence.SLOW; 0: every cycle).
    slow_read_interval_s: float = SLOW_READ_INTERVAL_S
    backends: Sequence[str] | None = None
    simulate: str | None = None
    node_labels: dict[str, str] = field(default_factory=dict)
    retry_s: float = 30.0
    ray: bool = True
    ray_address: str | None = None
    ray_node_id: str | None = None
    attribution_interval_s: float = 2.0
    task_id_cap: int = DEFAULT_TASK_ID_CAP
    names: bool = True  # actor classes/names and task names in labels
    # Registration in the Ray cluster's GCS (exporter/cluster/registry.py); 0 turns it off.
    register_interval_s: float = 10.0
    deployed: bool = False  # started by `ray-accel deploy` as a Ray actor
    # OTLP metric export (exporter/sinks/otlp.py): off unless an endpoint is configured
    # here or in the standard OTEL_EXPORTER_OTLP_* environment variables.
    otlp_endpoint: str | None = None
    otlp_protocol: str | None = None
    otlp_interval_s: float | None = None
    # Ray Direct Transport transfers and hung collectives (docs/transfers.md).
    transfers: bool = True
    transfer_stall_after_s: float = DEFAULT_STALL_AFTER_S
    transfer_report_after_s: float = DEFAULT_REPORT_AFTER_S
    transfer_pairing: str = "auto"  # "auto" (on the head node), "always", "never"
    collective_window_s: float = DEFAULT_WINDOW_S
    collective_busy_utilization: float = DEFAULT_BUSY_UTILIZATION
    collective_flat_bytes_per_s: float = DEFAULT_FLAT_BYTES_PER_S
    # Header and idle timeouts, connection cap (exporter/serving.py).
    limits: ServingLimits = field(default_factory=ServingLimits)
    # Token, /metrics auth, TLS and basic auth (exporter/exposure.py).
    exposure: ExposureSettings = field(default_factory=ExposureSettings)
