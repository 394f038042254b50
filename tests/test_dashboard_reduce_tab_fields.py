"""What the node page reads from a device's snapshot: activity, holder verdicts, memory
as Ray shows it, and the hung-collective verdict; absent stays absent."""

from __future__ import annotations

from ray_accel.exporter import catalog as m
from ray_accel.exporter.node_view import reduce_snapshot


def _entry(value: float, **labels: str) -> dict:
    return {"labels": labels, "value": value}


def _holder(pid: int, fraction: float, **verdict) -> dict:
    return {"pid": pid, "ray_job_id": "01000000", "ray_actor_id": "a" * 32,
            "actor_class": "Spinner", "fraction": fraction, **verdict}


def _snapshot(device: dict) -> dict:
    return {"devices": [{"uuid": "GPU-0", "index": "0", "up": True, **device}]}


def test_node_page_fields_are_kept():
    values = {
        m.MEMORY_USAGE: [_entry(0.0)], m.MEMORY_RESERVED: [_entry(633339904.0)],
        m.ACTIVITY: [_entry(1.0, engine="graphics"), _entry(0.02, engine="sm")],
        m.PIPE_ACTIVITY: [_entry(0.0, pipe="tensor")], m.DEVICE_SPINNING: [_entry(1.0)],
    }
    device = reduce_snapshot(_snapshot({
        "values": values, "collective_suspected_stall": True,
        "holders": [_holder(7, 1.0, idle=False, spinning=True, idle_rule="activity",
                            shared=False),
                    _holder(8, 0.5, idle=True, idle_rule="utilization", shared=True)],
    }))["devices"][0]
    assert device["memory_used_bytes"] == 0.0
    assert device["memory_reserved_bytes"] == 633339904.0
    assert device["activity"] == {"graphics": 1.0, "sm": 0.02}
    assert device["pipe_activity"] == {"tensor": 0.0}
    assert device["spinning"] == 1.0
    assert device["collective_suspected_stall"] is True
    whole, half = device["holders"]
    assert (whole["spinning"], whole["idle"], whole["shared"], whole["idle_rule"]) == \
        (True, False, False, "activity")
    assert (half["spinning"], half["idle"], half["shared"], half["idle_rule"]) == \
        (False, True, True, "utilization")


def test_absent_values_stay_absent():
    device = reduce_snapshot(_snapshot({
        "values": {m.MEMORY_USAGE: [_entry(1.0)]},
        "collective_suspected_stall": "yes",  # not a verdict
        "holders": [_holder(9, 0.25)],  # an agent older than the verdict fields
    }))["devices"][0]
    assert device["memory_reserved_bytes"] is None
    assert device["activity"] == {} and device["pipe_activity"] == {}
    assert device["spinning"] is None
    assert device["collective_suspected_stall"] is None
    (holder,) = device["holders"]
    assert holder["shared"] is True  # a fraction of the device, by its share
    assert holder["idle_rule"] == "" and holder["spinning"] is False
