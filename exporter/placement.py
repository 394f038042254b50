"""Where a node sits: zone, region, rack, slice, NVLink domain and node pool.

Taken, first found wins, from the Ray node's labels (Ray's own `ray.io/*` keys,
then plain keys users give with `ray start --labels`, then Kubernetes'
well-known topology keys), from the environment the agent runs in, and last
from the devices' own facts: the NVLink domain from their fabric information,
the slice from the TPU chips' slice name (GKE's TPU_NAME).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from .model import Device, NodeSnapshot

PLACEMENT_KEYS = ("zone", "region", "rack", "slice", "nvlink_domain", "node_pool")

_LABEL_KEYS: dict[str, tuple[str, ...]] = {
    "zone": ("ray.io/availability-zone", "zone", "topology.kubernetes.io/zone"),
    "region": ("ray.io/availability-region", "region", "topology.kubernetes.io/region"),
    "rack": ("ray.io/rack", "rack", "topology.kubernetes.io/rack"),
    "slice": ("ray.io/tpu-slice-name", "slice"),
    "nvlink_domain": ("ray.io/nvlink-domain", "nvlink_domain", "nvlink-domain"),
    # Ray's worker group (KubeRay's group name), then the clouds' node pool labels
    "node_pool": ("ray.io/node-group", "node_pool", "node-pool",
                  "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
                  "karpenter.sh/nodepool", "kubernetes.azure.com/agentpool"),
}
_ENVIRONMENT_KEYS: dict[str, tuple[str, ...]] = {
    "zone": ("RAY_NODE_ZONE", "RAY_ACCEL_ZONE"),
    "region": ("RAY_NODE_REGION", "RAY_ACCEL_REGION"),
    "rack": ("RAY_ACCEL_RACK",),
    "slice": ("RAY_ACCEL_SLICE",),
    "nvlink_domain": ("RAY_ACCEL_NVLINK_DOMAIN",),
    "node_pool": ("RAY_NODE_TYPE_NAME", "RAY_ACCEL_NODE_POOL"),
}

# placement key -> the device fact that tells it, when no label or variable does
_DEVICE_FACTS: dict[str, str] = {"slice": "tpu_slice_name", "nvlink_domain": "nvlink_domain"}


def _first(keys: Iterable[str], source: Mapping[str, str]) -> str:
    return next((source[key] for key in keys if source.get(key)), "")


def node_placement(ray_labels: Mapping[str, str], devices: Iterable[Device],
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The node's placement; empty strings for what no source knows."""
    environ = os.environ if environ is None else environ
    placement = {
        key: _first(_LABEL_KEYS[key], ray_labels) or _first(_ENVIRONMENT_KEYS[key], environ)
        for key in PLACEMENT_KEYS
    }
    devices = list(devices)
    for key, fact in _DEVICE_FACTS.items():
        if not placement[key]:
            placement[key] = ",".join(sorted({d.facts.get(fact, "") for d in devices} - {""}))
    return placement


def snapshot_placement(snapshot: NodeSnapshot) -> dict[str, str]:
    """Where the snapshot's node sits (see `node_placement`)."""
    return node_placement(snapshot.attribution.node_labels, (s.device for s in snapshot.devices))
