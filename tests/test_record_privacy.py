"""Identities in a recorded scenario replaced by placeholders (exporter/record/privacy.py)."""

from __future__ import annotations

import copy

from ray_accel.exporter.record.privacy import PID_BASE, scrub

GPU = "GPU-41b99023-13a3-57a6-85f0-a046a8d1c77b"
AMD_GPU = "3aff75a3-0000-1000-8061-4b2e8c7d1f05"


def _recorded() -> dict:
    return {"devices": [
        {"uuid": GPU, "serial": "1324223025561", "processes": [
            {"pid": 4242, "until_s": 5.5},  # came and went twice, beside one that stayed
            {"pid": 777},
            {"pid": 4242, "from_s": 9.5}]},
        {"vendor": "amd", "uuid": AMD_GPU, "serial": "E7A1C40B92D35501",
         "partitions": [{"uuid": AMD_GPU[:-1] + "6", "processes": [{"pid": 4242}]}]},
    ], "neuron": {"instance": {"instance_id": "i-0a1b2c3d4e5f60718"},
                  "runtimes": [{"pid": 777, "cores": [0]}]},
        "tpu": {"slice_name": "team-a-slice", "chips": []}}


def test_a_process_keeps_one_placeholder_in_every_entry_and_device() -> None:
    scrubbed = scrub(_recorded())
    first, stayed, again = scrubbed["devices"][0]["processes"]
    partition = scrubbed["devices"][1]["partitions"][0]["processes"][0]
    runtime = scrubbed["neuron"]["runtimes"][0]
    assert first["pid"] == again["pid"] == partition["pid"] == PID_BASE
    assert stayed["pid"] == runtime["pid"] == PID_BASE + 1
    assert (first["until_s"], again["from_s"]) == (5.5, 9.5)  # the windows are kept


def test_uuids_serials_and_names_are_replaced_with_stable_placeholders() -> None:
    scrubbed, again = scrub(_recorded()), scrub(_recorded())
    nvidia, amd = scrubbed["devices"]
    assert nvidia["uuid"].startswith("GPU-") and nvidia["uuid"] != GPU
    assert "-" in amd["uuid"] and not amd["uuid"].startswith(AMD_GPU[:9])  # no made-up prefix
    assert amd["partitions"][0]["uuid"] not in (AMD_GPU[:-1] + "6", amd["uuid"])
    assert [d["serial"] for d in scrubbed["devices"]] == ["SERIAL-0", "SERIAL-1"]
    assert scrubbed["neuron"]["instance"]["instance_id"] != "i-0a1b2c3d4e5f60718"
    assert scrubbed["tpu"]["slice_name"] == "slice-0"
    assert scrubbed == again  # the same device gets the same placeholder every time


def test_scrub_changes_only_identities() -> None:
    original = _recorded()
    scrubbed = scrub(copy.deepcopy(original))
    assert scrubbed["devices"][1]["vendor"] == "amd"
    assert scrubbed["neuron"]["runtimes"][0]["cores"] == [0]
    assert [len(d.get("processes", [])) for d in scrubbed["devices"]] == [3, 0]
