"""A recording -> a scenario document in the format of docs/simulation.md.

The document is checked with the simulator's own `load_scenario` before it is
returned, so a file `ray-accel record` writes always replays.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..simulate.scenario import load_scenario
from .events import busy_rules, error_rules, hang_rules, lost_at, xid_events
from .history import Recording
from .nvidia import device_scenario, mig_scenario, topology_of
from .privacy import scrub
from .series import DeviceSeries

RECORDED_NAME = "recorded"


class NothingRecorded(Exception):
    """No backend found a device to record."""


def _nvidia_devices(recording: Recording) -> list[str]:
    """The physical NVIDIA GPUs identified during the recording (not the placeholders of
    GPUs whose discovery had not finished), by NVML index."""
    uuids = [u for u, d in recording.devices.items()
             if d.vendor == "nvidia" and not d.parent_uuid and u.startswith("GPU-")]
    return sorted(uuids, key=lambda u: int(recording.devices[u].index))


def _children(recording: Recording, parent: str) -> list[str]:
    """The parent's MIG devices, by GPU instance id."""
    found = [u for u, d in recording.devices.items() if d.parent_uuid == parent]
    return sorted(found, key=lambda u: [int(p) for p in recording.devices[u].index.split("/")])


def recording_start(recording: Recording) -> float:
    """Wall-clock time of the recording's t = 0: its first device sample."""
    first = recording.frames[0]
    return min((d.taken_at for d in first.devices), default=first.taken_at)


def build_scenario(recording: Recording, *, keep_identities: bool = False,
                   call_costs: Mapping[str, list[float]] | None = None,
                   name: str = RECORDED_NAME) -> dict[str, Any]:
    """The scenario replaying `recording` (t = 0 at its first sample)."""
    uuids = _nvidia_devices(recording)
    if not uuids or not recording.frames:
        others = sorted({d.vendor for d in recording.devices.values() if d.vendor != "nvidia"})
        if others:
            raise NothingRecorded(f"only {', '.join(others)} devices were found, and recording "
                                  "reads NVIDIA devices only so far")
        raise NothingRecorded("no backend found a device to record")
    t0 = recording_start(recording)
    children = {uuid: _children(recording, uuid) for uuid in uuids}
    series = {uuid: DeviceSeries() for uuid in [*uuids, *(c for cs in children.values()
                                                          for c in cs)]}
    last_taken: dict[str, float] = {}
    for frame in recording.frames:
        for device_frame in frame.devices:
            uuid = device_frame.uuid
            if uuid not in series:
                continue
            if device_frame.stale or not device_frame.up:
                # Its values are old (a down device keeps its counters): what counts is when.
                series[uuid].add(max(frame.taken_at - t0, 0.0), device_frame)
                continue
            if last_taken.get(uuid) == device_frame.taken_at:
                continue  # the same sample again, while the device is late to answer
            last_taken[uuid] = device_frame.taken_at
            links_at = device_frame.counters_at
            series[uuid].add(max(device_frame.taken_at - t0, 0.0), device_frame,
                             None if links_at is None else max(links_at - t0, 0.0))
    end_s = recording.frames[-1].taken_at - t0
    numa = {u: int(recording.devices[u].facts["numa_node"])
            if recording.devices[u].facts.get("numa_node", "").isdigit() else None
            for u in uuids}
    devices: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    delays: list[dict[str, Any]] = []
    interval = recording.interval_s
    for index, uuid in enumerate(uuids):
        device = recording.devices[uuid]
        one = series[uuid]
        migs = [mig_scenario(recording.devices[c], series[c], interval) for c in children[uuid]]
        scenario_device = device_scenario(device, one, recording.link_facts.get(uuid, {}),
                                          interval, migs)
        scenario_device.update(topology_of(device, numa))
        if (lost := lost_at(one)) is not None:
            scenario_device["lost_at_s"] = lost
        if events := xid_events(one):
            scenario_device["xid_events"] = events
        devices.append(scenario_device)
        errors += error_rules(index, one, interval)
        delays += hang_rules(index, one, interval, end_s)
    delays += busy_rules(call_costs or {})
    document: dict[str, Any] = {
        "name": name,
        "description": f"Recorded for {end_s:.0f} s at {interval:g} s per sample "
                       f"({'identities kept' if keep_identities else 'identities replaced'}).",
    }
    facts = next((b.facts for b in recording.backends if b.name == "nvidia"), {})
    for key in ("driver_version", "nvml_version"):
        if facts.get(key):
            document[key] = facts[key]
    if str(facts.get("cuda_driver_version", "")).isdigit():
        document["cuda_driver_version"] = int(facts["cuda_driver_version"])
    document["devices"] = devices
    if errors:
        document["errors"] = errors
    if delays:
        document["delays"] = delays
    if not keep_identities:
        scrub(document)
    load_scenario(json.loads(json.dumps(document)))  # raises ScenarioError naming the key
    return document
