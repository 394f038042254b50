"""Synthetic label sets for the promtool cases: one agent, one GPU, one worker, one link."""

from __future__ import annotations

from collections.abc import Mapping

NODE = {"instance": "10.0.0.7:9478", "ray_node_id": "5f0c2a7e41b3", "SessionName":
        "session_2025_01_01_00-00-00_000000_1"}
DEVICE = {**NODE, "vendor": "nvidia", "model": "NVIDIA H200", "index": "3",
          "uuid": "GPU-09fc8680-7dde-5a52-b532-6b579b5f1a62"}
WORKER = {**DEVICE, "pid": "4242", "ray_job_id": "02000000", "ray_worker_id": "8c1e0d",
          "ray_actor_id": "a1b2c3d4", "actor_class": "IdleHolder"}
# An agent run with `--no-ray` (or before it found its Ray node): no ray_node_id.
NO_RAY_NODE = {"instance": "10.0.0.8:9478"}
NO_RAY_DEVICE = {**NO_RAY_NODE, **{k: v for k, v in DEVICE.items() if k not in NODE}}
LINK = {**DEVICE, "link_type": "nvlink", "link": "4"}
TRANSFER = {**NODE, "ray_job_id": "02000000", "src_actor_id": "5e1d0c3b", "src_actor_class":
            "Producer", "src_node_id": NODE["ray_node_id"], "src_devices": DEVICE["uuid"],
            "dst_actor_id": "9a8b7c6d", "dst_actor_class": "Consumer", "dst_node_id":
            "7d2e9b1c04a5", "dst_devices": "GPU-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"}
MEMORY_LIMIT = 100e9


def on(labels: Mapping[str, str], job: str) -> dict[str, str]:
    """`labels` as scraped under the agents' job."""
    return {"job": job, **labels}
