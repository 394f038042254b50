"""A recording -> a scenario document in the format of docs/simulation.md.

NVIDIA GPUs (with their MIG devices) and AMD GPUs (with their compute
partitions) are recorded into `devices`, NVIDIA's first so that a device's
position is its index for error rules of either vendor; Gaudi cards into the
`gaudi` section, TPU chips into the `tpu` section, a Neuron node into the
`neuron` section. A third-party backend's devices are not recorded: the
recording names them in the description, and a node with nothing else is
refused naming them. The
document is checked with the simulator's own `load_scenario` before it is
returned, so a file `ray-accel record` writes always replays.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import Device
from ..simulate.scenario import load_scenario
from . import amd, gaudi, neuron, nvidia, tpu
from .events import busy_rules, error_rules, hang_rules, lost_at, xid_events
from .history import Recording
from .privacy import scrub
from .series import DeviceSeries
from .vendors import VendorRecorder

RECORDED_NAME = "recorded"
RECORDERS: tuple[VendorRecorder, ...] = (nvidia.RECORDER, amd.RECORDER, gaudi.RECORDER,
                                         tpu.RECORDER, neuron.RECORDER)
# What a node whose devices no recorder reads (a third-party backend's) is told.
NOT_RECORDED = ("recording reads the NVIDIA, AMD, Gaudi, TPU and Neuron backends' devices; "
                "a third-party backend's are not recorded")


class NothingRecorded(Exception):
    """No backend found a device that can be recorded."""


def _physical(recording: Recording, recorder: VendorRecorder) -> list[str]:
    """The vendor's physical devices identified during the recording, by index."""
    uuids = [u for u, d in recording.devices.items()
             if d.vendor == recorder.vendor and recorder.identified(d)]
    return sorted(uuids, key=lambda u: int(recording.devices[u].index))


def _children(recording: Recording, parent: str) -> list[str]:
    """The parent's MIG devices or compute partitions, by their index ("gpu/gi/ci", "gpu/p")."""
    found = [u for u, d in recording.devices.items() if d.parent_uuid == parent]
    return sorted(found, key=lambda u: [int(p) for p in recording.devices[u].index.split("/")])


def skipped_families(recording: Recording) -> dict[str, int]:
    """Devices of families the recorder does not write, by backend name (gaudi, tpu, ...)."""
    names = {b.vendor: b.name for b in recording.backends}
    recorded = {r.vendor for r in RECORDERS}
    found: dict[str, int] = {}
    for device in recording.devices.values():
        if device.vendor not in recorded and not device.parent_uuid:
            family = names.get(device.vendor, device.vendor)
            found[family] = found.get(family, 0) + 1
    return dict(sorted(found.items()))


def describe_skipped(skipped: Mapping[str, int]) -> str:
    """"gaudi (8 devices)" and the like, joined."""
    return ", ".join(f"{family} ({count} device{'s' if count != 1 else ''})"
                     for family, count in skipped.items())


def device_count(document: Mapping[str, Any]) -> int:
    """The physical devices a scenario document holds: its `devices` and those of each
    family's section (Gaudi cards, TPU chips, Neuron devices)."""
    count = len(document.get("devices") or ())
    for recorder in RECORDERS:
        section = document.get(recorder.section) if recorder.section else None
        if not isinstance(section, Mapping):
            continue
        if recorder.devices_key is not None:
            count += len(section.get(recorder.devices_key) or ())
        elif recorder.count_key is not None:
            count += int(section.get(recorder.count_key) or 0)
    return count


def recording_start(recording: Recording) -> float:
    """Wall-clock time of the recording's t = 0: the first device sample taken in its first
    cycle (else that cycle's own time). A device lost or hung before it holds its last
    answer's time, which may be long before: no start."""
    first = recording.frames[0]
    since = first.taken_at - recording.interval_s
    return min((d.taken_at for d in first.devices if d.taken_at >= since),
               default=first.taken_at)


def _series(recording: Recording, uuids: list[str], t0: float) -> dict[str, DeviceSeries]:
    """Each device's series, t = 0 at `t0`; a sample repeated while late is kept once."""
    series = {uuid: DeviceSeries() for uuid in uuids}
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
    return series


def _numa(devices: Mapping[str, Device], uuids: list[str]) -> dict[str, int | None]:
    return {u: int(devices[u].facts["numa_node"])
            if devices[u].facts.get("numa_node", "").isdigit() else None for u in uuids}


def _device_entry(recording: Recording, recorder: VendorRecorder, uuid: str,
                  series: Mapping[str, DeviceSeries], kids: list[dict[str, Any]],
                  numa: Mapping[str, int | None]) -> dict[str, Any]:
    """One physical device's scenario entry, with its loss and XID events."""
    device, one = recording.devices[uuid], series[uuid]
    entry = recorder.device(device, one, recording.link_facts.get(uuid, {}),
                            recording.interval_s, kids)
    entry.update(recorder.peers(device, numa))
    if (lost := lost_at(one, recorder.lost_kinds)) is not None:
        entry["lost_at_s"] = lost
    if events := xid_events(one):
        entry["xid_events"] = events
    return entry


def _section(recording: Recording, recorder: VendorRecorder,
             series: Mapping[str, DeviceSeries], facts: Mapping[str, str],
             call_costs: Mapping[str, list[float]]) -> dict[str, Any]:
    """A family's own section: its versions, devices, error and delay rules (devices by
    position in it)."""
    uuids = _physical(recording, recorder)
    section: dict[str, Any] = recorder.top_level(facts)
    if recorder.devices_key is not None:
        section[recorder.devices_key] = [_device_entry(recording, recorder, uuid, series, [], {})
                                         for uuid in uuids]
    if recorder.host_keys is not None:
        children = {u: [(recording.devices[c], series[c]) for c in _children(recording, u)]
                    for u in uuids}
        section.update(recorder.host_keys([recording.devices[u] for u in uuids],
                                          [series[u] for u in uuids], facts, children,
                                          recording.interval_s))
    errors = [rule for index, uuid in enumerate(uuids) if recorder.records_errors
              for rule in error_rules(index, series[uuid], recording.interval_s, recorder)]
    if errors:
        section["errors"] = errors
    if delays := _delays(recording, recorder, [series[u] for u in uuids], call_costs):
        section["delays"] = delays
    return section


def _delays(recording: Recording, recorder: VendorRecorder, series: Sequence[DeviceSeries],
            call_costs: Mapping[str, list[float]], first_index: int = 0
            ) -> list[dict[str, Any]]:
    """The vendor's `delays` rules: each stale device's hung calls (`series` of the devices
    at positions `first_index`, `first_index` + 1, ...), then the library's costly calls as
    `busy` delays."""
    if not recorder.hung_calls:
        return []
    end_s = recording.frames[-1].taken_at - recording_start(recording)
    delays = [rule for index, one in enumerate(series, first_index)
              for rule in hang_rules(index, one, recording.interval_s, end_s,
                                     recorder.hung_calls)]
    return delays + busy_rules(call_costs, recorder.call_prefix)


def build_scenario(recording: Recording, *, keep_identities: bool = False,
                   call_costs: Mapping[str, list[float]] | None = None,
                   name: str = RECORDED_NAME) -> dict[str, Any]:
    """The scenario replaying `recording` (t = 0 at its first sample)."""
    physical = {r.vendor: _physical(recording, r) for r in RECORDERS}
    skipped = skipped_families(recording)
    if not recording.frames or not any(physical.values()):
        if skipped:
            raise NothingRecorded(f"only {describe_skipped(skipped)} found: {NOT_RECORDED}")
        raise NothingRecorded("no backend found a device to record")
    t0 = recording_start(recording)
    children = {uuid: _children(recording, uuid) for uuids in physical.values()
                for uuid in uuids}
    series = _series(recording, [*children, *(c for cs in children.values() for c in cs)], t0)
    end_s = recording.frames[-1].taken_at - t0
    numa = _numa(recording.devices, list(children))
    interval = recording.interval_s
    devices: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    delays: list[dict[str, Any]] = []
    versions: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for recorder in RECORDERS:
        facts = next((b.facts for b in recording.backends if b.vendor == recorder.vendor), {})
        if not physical[recorder.vendor]:
            continue
        if recorder.section is not None:
            sections[recorder.section] = _section(recording, recorder, series, facts,
                                                  call_costs or {})
            continue
        versions.update(recorder.top_level(facts))
        first_index = len(devices)
        for uuid in physical[recorder.vendor]:
            index, one = len(devices), series[uuid]
            kids = [recorder.child(recording.devices[c], series[c], interval)
                    for c in children[uuid]]
            devices.append(_device_entry(recording, recorder, uuid, series, kids, numa))
            errors += error_rules(index, one, interval, recorder)
        delays += _delays(recording, recorder, [series[u] for u in physical[recorder.vendor]],
                          call_costs or {}, first_index)
    description = (f"Recorded for {end_s:.0f} s at {interval:g} s per sample "
                   f"({'identities kept' if keep_identities else 'identities replaced'}).")
    if skipped:
        description += f" Not recorded: {describe_skipped(skipped)}."
    document: dict[str, Any] = {"name": name, "description": description,
                                "recorded_until_s": round(max(end_s, 0.0), 3), **versions,
                                "devices": devices, **sections}
    if errors:
        document["errors"] = errors
    if delays:
        document["delays"] = delays
    if not keep_identities:
        scrub(document)
    load_scenario(json.loads(json.dumps(document)))  # raises ScenarioError naming the key
    return document
