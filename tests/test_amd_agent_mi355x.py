"""`ray-accel agent --simulate mi355x-8`: eight MI355Xs and ROCm 7's activity, over real HTTP."""

from __future__ import annotations

import shutil
import subprocess

from agent_process import AgentProcess
from prometheus_client.parser import text_string_to_metric_families as parse_text

XCP_BUSY = "ray_accelerator_amd_xcp_gfx_utilization_ratio"
BELOW_LIMIT = "ray_accelerator_amd_xcp_gfx_below_host_limit_ratio"
RESIDENCY = "ray_accelerator_throttle_residency_ratio"


def series(body: bytes, name: str) -> list:
    return [s for family in parse_text(body.decode()) for s in family.samples if s.name == name]


def test_mi355x_node_serves_its_gpus_partitions_and_per_xcc_activity():
    with AgentProcess("--simulate", "mi355x-8", "--interval", "0.2") as agent:
        snapshot = agent.wait_for(lambda d: len(d["devices"]) == 15 and d["cycle"] >= 3)
        _, _, body = agent.get("/metrics")
        promtool = shutil.which("promtool")
        assert promtool, "promtool missing: run `make system-deps`"
        checked = subprocess.run([promtool, "check", "metrics"], input=body,
                                 capture_output=True, timeout=60)
        assert checked.returncode == 0 and not checked.stdout.strip(), checked

        indices = sorted(d["index"] for d in snapshot["devices"])
        assert indices == sorted([*map(str, range(8)), *(f"4/{p}" for p in range(1, 8))])
        assert {d["facts"]["architecture"] for d in snapshot["devices"]} == {"gfx950"}
        power = series(body, "hw_power_watts")
        assert len(power) == 8 and all(0 < s.value <= 1400 for s in power)
        assert {s.value for s in series(body, "ray_accelerator_power_limit_watts")} == {1400}
        assert len(series(body, "hw_gpu_io_bytes_total")) == 8 * 7 * 2  # XGMI full mesh

        busy = series(body, XCP_BUSY)
        assert len(busy) == 8 * 8  # eight XCCs each: XCP 0 in SPX, one per XCP on the CPX GPU
        assert {(s.labels["xcp"], s.labels["xcc"]) for s in busy
                if s.labels["index"] == "4"} == {(str(p), "0") for p in range(8)}
        assert all(s.value > 0.5 for s in busy if s.labels["index"] == "0")
        low = {s.labels["index"]: s.value for s in series(body, BELOW_LIMIT)
               if s.labels["reason"] == "low_utilization" and s.labels["xcc"] == "0"
               and s.labels["xcp"] == "0"}
        assert low["5"] == 1.0 and low["7"] == 1.0 and low["0"] < 0.5
        ppt = {s.labels["index"] for s in series(body, RESIDENCY)
               if s.labels["reason"] == "sw_power_cap"}
        assert ppt == {str(i) for i in range(8)}
        health = agent.json("/healthz")
        amd = health["backends"]["amd"]
        assert (amd["up"], amd["devices"], amd["message"]) == (True, 15, "")
