"""The GKE TPU device plugin's Prometheus endpoint, read when libtpu's service is not up.

Ray 2.60's reporter reads the same endpoint (``http://$TPU_DEVICE_PLUGIN_ADDR/metrics``,
the plugin's port 2112). Each sample carries ``accelerator_id="<id>-<n>"``,
``model`` and ``tpu_topology`` labels. ``tensorcore_utilization`` and
``memory_bandwidth_utilization`` are host metrics numbered 0..N-1 on the host;
``duty_cycle``, ``memory_used`` and ``memory_total`` are runtime metrics numbered
across the slice, so, as Ray does, their numbers are mapped in order onto the
host's chips. Utilizations are percentages, memory is in bytes.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

ADDRESS_ENV = "TPU_DEVICE_PLUGIN_ADDR"
FETCH_TIMEOUT_S = 2.0
HOST_METRICS = ("tensorcore_utilization", "memory_bandwidth_utilization")
RUNTIME_METRICS = ("duty_cycle", "memory_used", "memory_total")


class PluginUnavailable(Exception):
    """The endpoint did not answer, or answered something that is not Prometheus text."""


@dataclass(frozen=True, slots=True)
class PluginReadout:
    """What the plugin said: host chip index -> plugin metric name -> value."""

    chips: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    model: str = ""
    topology: str = ""


def plugin_address(environ: Mapping[str, str] | None = None) -> str:
    """``host:port`` of the device plugin's metrics, or "" when not configured."""
    environ = os.environ if environ is None else environ
    return environ.get(ADDRESS_ENV, "").strip()


def fetch(address: str, timeout_s: float = FETCH_TIMEOUT_S) -> str:
    """The plugin's /metrics text; raises PluginUnavailable."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as reply:
            return reply.read().decode("utf-8")
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise PluginUnavailable(f"{address}: {error}") from None


def _index(accelerator_id: str) -> int | None:
    _, _, number = accelerator_id.rpartition("-")
    return int(number) if number.isdigit() else None


def parse(text: str) -> PluginReadout:
    """The plugin's per-chip values, re-indexed onto this host's chips."""
    host: dict[int, dict[str, float]] = {}
    runtime: dict[int, dict[str, float]] = {}
    model = topology = ""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as error:
        raise PluginUnavailable(f"not Prometheus text: {error}") from None
    for family in families:
        for sample in family.samples:
            name = sample.name
            if name not in HOST_METRICS + RUNTIME_METRICS:
                continue
            index = _index(sample.labels.get("accelerator_id", ""))
            if index is None:
                continue
            model = model or sample.labels.get("model", "")
            topology = topology or sample.labels.get("tpu_topology", "")
            target = host if name in HOST_METRICS else runtime
            target.setdefault(index, {})[name] = float(sample.value)
    chips = {i: dict(values) for i, values in host.items()}
    # Runtime numbers are slice-wide: the k-th smallest belongs to the k-th chip here.
    local = sorted(host) or list(range(len(runtime)))
    if runtime and len(runtime) == len(local):
        for target, source in zip(local, sorted(runtime), strict=True):
            chips.setdefault(target, {}).update(runtime[source])
    return PluginReadout(chips, model, topology)
