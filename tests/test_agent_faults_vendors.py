"""AMD and Gaudi devices under the faults NVIDIA's are tested with (test_agent_faults.py):
a device that answers no call, and one whose identity is not read at discovery."""

from __future__ import annotations

import pytest
from agent_process import AgentProcess, write_scenario
from prometheus_client.parser import text_string_to_metric_families as parse_text

from ray_accel.exporter.simulate import SimulatedHardware


def _amd_gpu(position: int) -> dict:
    return {"vendor": "amd", "uuid": f"e7ff74a1-0000-1000-80a2-7a3d1f5c9e2{position}",
            "pci_bus_id": f"0000:0{position + 1}:00.0", "name": "AMD Instinct MI300X",
            "vram_total_mb": 196592, "vram_used_mb": 1000, "gfx_activity_percent": 50,
            "socket_power_w": 300, "power_cap_w": 750, "temperature_hotspot_c": 60,
            "ecc_correctable": {"start": 5, "rate_per_s": 1}}


def _gaudi_card(position: int) -> dict:
    return {"uuid": f"01P0-HL2080A0-15-TNB700-02-05-0{position}",
            "pci_bus_id": f"0000:1{position}:00.0", "module_id": position,
            "serial": f"AN5100000{position}", "name": "HL-225", "utilization_percent": 50,
            "memory_total_bytes": 103079215104, "memory_used_bytes": 2147483648,
            "power_mw": 300000, "power_limit_mw": 600000,
            "energy_mj": {"start": 1000, "rate_per_s": 300000}, "temperatures_c": {"aip": 50},
            "ecc_corrected": {"start": 3, "rate_per_s": 1}}


def _amd(errors: list[dict]) -> dict:
    return {"name": "amd-faults", "devices": [_amd_gpu(i) for i in range(3)], "errors": errors}


def _gaudi(errors: list[dict]) -> dict:
    return {"name": "gaudi-faults", "gaudi": {"driver_version": "1.21.3-57",
                                              "devices": [_gaudi_card(i) for i in range(3)],
                                              "errors": errors}}


VENDORS = {
    # vendor: (scenario maker, every call's pattern, the UUID call, a counter's series)
    "amd": (_amd, "amdsmi_*", "amdsmi_get_gpu_device_uuid", "hw_errors_total"),
    "gaudi": (_gaudi, "hlml*", "hlmlDeviceGetUUID", "hw_energy_joules_total"),
}


def _indexes(body: bytes, name: str) -> set[str]:
    return {s.labels["index"] for f in parse_text(body.decode()) for s in f.samples
            if s.name == name}


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_device_that_answers_no_call_is_down_with_why(tmp_path, vendor):
    """Every call of device 1 times out: it is down (not up with no values), named in
    /healthz, its counters kept at their last values; up again once it answers."""
    make, every_call, _, counter = VENDORS[vendor]
    doc = make([{"function": every_call, "device": 1, "code": "TIMEOUT", "from_s": 2.0,
                 "until_s": 9.0}])
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.3",
                      "--no-ray") as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 3 and all(x["up"] for x in d["devices"]),
                       timeout=30)
        down = agent.wait_for(lambda d: not d["devices"][1]["up"], timeout=30)
        assert down["devices"][1]["errors"] == {"every call": "timeout"}
        assert [x["up"] for x in down["devices"]] == [True, False, True]
        health = agent.json("/healthz")
        assert health["status"] == "degraded"
        assert [(p["index"], p["state"]) for p in health["not_answering"]] == [("1", "down")]
        _, _, body = agent.get("/metrics")
        assert "1" in _indexes(body, counter)
        agent.wait_for(lambda d: all(x["up"] for x in d["devices"]), timeout=30)


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_device_whose_uuid_fails_at_discovery_is_down_then_joins_under_its_uuid(tmp_path,
                                                                                 vendor):
    """A stand-in name is kept only for a device not identified yet: one whose UUID call
    fails at discovery is listed down with why and identified again, not named
    `<vendor>-index-N` for good while looking healthy."""
    make, _, uuid_call, _ = VENDORS[vendor]
    doc = make([{"function": uuid_call, "device": 1, "code": "TIMEOUT", "until_s": 6.0}])
    uuid = (doc.get("gaudi") or doc)["devices"][1]["uuid"]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.5",
                      "--retry", "1", "--no-ray") as agent:
        first = agent.wait_for(lambda d: len(d["devices"]) == 3)
        failed = first["devices"][1]
        assert failed["uuid"] == f"{vendor}-index-1" and not failed["up"]
        assert failed["errors"]["discovery"].startswith(uuid_call)
        assert agent.json("/healthz")["status"] == "degraded"
        joined = agent.wait_for(lambda d: [x["up"] for x in d["devices"]] == [True] * 3,
                                timeout=30)
        assert joined["devices"][1]["uuid"] == uuid
        assert agent.json("/healthz")["status"] == "ok"


def test_an_amd_gpu_hanging_at_its_driver_query_hides_no_other(tmp_path):
    """GPU 0 hangs in the driver-information call the backend asks at start (the others do
    not answer it, so GPU 0 is always asked): the other GPUs report, GPU 0 is listed stale
    with why. Before, the call was made for every GPU at once and hid them all."""
    doc = _amd([{"function": "amdsmi_get_gpu_driver_info", "device": device,
                 "code": "NOT_SUPPORTED"} for device in (1, 2)])
    doc["delays"] = [{"function": "amdsmi_get_gpu_driver_info", "device": 0,
                      "seconds": 600}]
    with AgentProcess("--simulate", write_scenario(tmp_path, doc), "--interval", "0.5",
                      "--no-ray") as agent:
        first = agent.wait_for(lambda d: len(d["devices"]) == 3
                               and [x["up"] for x in d["devices"]][1:] == [True, True],
                               timeout=30)
        hung = first["devices"][0]
        assert hung["uuid"] == "amd-index-0" and not hung["up"]
        assert hung["errors"] == {"discovery": "not answering"}
        assert agent.json("/healthz")["status"] == "degraded"


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_device_removed_from_the_machine_does_not_lend_its_handle_to_another(tmp_path,
                                                                              vendor):
    """Device 1 leaves the machine while the agent runs: its handle names no other device
    (each keeps its own values under its own UUID), and it is down with why."""
    make = VENDORS[vendor][0]
    doc = make([])
    devices = (doc.get("gaudi") or doc)["devices"]
    power_key = "power_mw" if vendor == "gaudi" else "socket_power_w"
    for position, device in enumerate(devices):  # each device its own power
        device[power_key] = (200 + 100 * position) * (1000 if vendor == "gaudi" else 1)
    uuids = [d["uuid"] for d in devices]
    with SimulatedHardware.start(doc, state_dir=tmp_path / "hw") as hardware, \
            AgentProcess("--interval", "0.3", env=hardware.environ()) as agent:
        agent.wait_for(lambda d: len(d["devices"]) == 3 and all(x["up"] for x in d["devices"]),
                       timeout=30)
        del devices[1]
        hardware.update(doc)

        def by_uuid(snapshot: dict) -> dict[str, dict]:
            return {x["uuid"]: x for x in snapshot["devices"]}

        later = agent.wait_for(lambda d: not by_uuid(d)[uuids[1]]["up"], timeout=30)
        agent.wait_for(lambda d: d["cycle"] >= later["cycle"] + 3)
        now = by_uuid(agent.json("/api/v1/snapshot"))
        assert now[uuids[1]]["errors"]
        for uuid, watts in ((uuids[0], 200.0), (uuids[2], 400.0)):
            assert now[uuid]["up"]
            assert now[uuid]["values"]["hw.power"][0]["value"] == watts
