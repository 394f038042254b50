"""Identities in a recorded scenario, replaced by placeholders unless kept.

- GPU UUIDs (NVIDIA GPU and MIG, AMD GPU and compute partition, Gaudi card) and
  fabric cluster UUIDs become UUIDs derived from a hash of the
  original: the same GPU or NVLink domain gets the same placeholder in every
  recording (so trays of one rack still share a domain), and a random UUID
  cannot be read back from it;
- serial numbers become `SERIAL-<n>` by device position, pids `1000 + n` by
  first appearance, the same pid always the same placeholder within a file;
- a TPU slice's name becomes `slice-0`, an EC2 instance id (which names Neuron
  devices) one derived from its hash; Neuron runtimes' pids are replaced like the
  others; hostnames and Ray identities are never written (the scenario has no key
  for them).
PCI bus ids, NUMA nodes and CPU affinity are kept: topology needs them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

PID_BASE = 1000
_PREFIX = re.compile(r"^[A-Z]+-")  # NVML's "GPU-", "MIG-"; amdsmi's UUIDs have none


def placeholder_uuid(original: str, prefix: str = "") -> str:
    """A stable UUID-shaped stand-in for `original` (with `prefix`, e.g. "GPU-")."""
    digest = hashlib.sha256(original.encode()).hexdigest()
    return (f"{prefix}{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-"
            f"{digest[20:32]}")


def scrub(scenario: dict[str, Any]) -> dict[str, Any]:
    """`scenario` with UUIDs, serials and pids replaced (changes it in place and returns it)."""
    pids: dict[int, int] = {}
    for position, device in enumerate(scenario.get("devices", [])):
        if "serial" in device:
            device["serial"] = f"SERIAL-{position}"
        for one in (device, *device.get("mig_devices", ()), *device.get("partitions", ())):
            if "uuid" in one:
                prefix = found.group(0) if (found := _PREFIX.match(one["uuid"])) else ""
                one["uuid"] = placeholder_uuid(one["uuid"], prefix)
            for process in one.get("processes", []):
                process["pid"] = pids.setdefault(process["pid"], PID_BASE + len(pids))
        fabric = device.get("fabric")
        if fabric and "cluster_uuid" in fabric:
            fabric["cluster_uuid"] = placeholder_uuid(fabric["cluster_uuid"])
    neuron = scenario.get("neuron") or {}
    for runtime in neuron.get("runtimes", []):
        runtime["pid"] = pids.setdefault(runtime["pid"], PID_BASE + len(pids))
    instance = neuron.get("instance") or {}
    if instance.get("instance_id"):  # the cloud's name of the machine (the devices' too)
        instance["instance_id"] = "i-" + hashlib.sha256(
            instance["instance_id"].encode()).hexdigest()[:17]
    tpu = scenario.get("tpu") or {}
    if tpu.get("slice_name"):  # the user's own name for the slice, like a hostname
        tpu["slice_name"] = "slice-0"
    for position, card in enumerate((scenario.get("gaudi") or {}).get("devices", [])):
        card["uuid"] = placeholder_uuid(card["uuid"])
        if "serial" in card:
            card["serial"] = f"SERIAL-{position}"
    return scenario
