"""Prometheus file-based service discovery for the registered agents.

The file lists one target group per live agent, in Prometheus's file_sd
format, and is replaced atomically (write a temporary file, then rename), so
Prometheus never reads half a file. By default it lies next to Ray's own
`<session_dir>/prom_metrics_service_discovery.json` on the head node.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .registry import AgentRecord

FILE_NAME = "ray_accel_service_discovery.json"
JOB = "ray-accel"


def default_path(session_dir: str) -> Path:
    """Where the discovery file goes for a session: beside Ray's own discovery file."""
    return Path(session_dir) / FILE_NAME


def target_groups(records: Iterable[AgentRecord]) -> list[dict]:
    """file_sd target groups: one per agent, labelled with its Ray node.

    An agent serving TLS gets `__scheme__: https`, so one scrape job reaches
    both kinds; the credentials are the scrape job's (see scrape_job).
    """
    groups = []
    for record in sorted(records, key=lambda r: r.node_id):
        labels = {"job": JOB, "ray_node_id": record.node_id}
        if record.url.startswith("https://"):
            labels["__scheme__"] = "https"
        groups.append({"targets": [record.target], "labels": labels})
    return groups


def scrape_job(sd_path: str, token_file: str | None, ca_file: str | None = None) -> dict:
    """The Prometheus scrape job reading the discovery file, with matching credentials.

    `token_file` holds the cluster's Ray token (Prometheus reads it on every
    scrape); `ca_file` verifies agents that serve TLS.
    """
    job: dict = {"job_name": JOB, "honor_labels": True,
                 "file_sd_configs": [{"files": [sd_path]}]}
    if token_file:
        job["authorization"] = {"type": "Bearer", "credentials_file": token_file}
    if ca_file:
        job["tls_config"] = {"ca_file": ca_file}
    return job


def render(records: Iterable[AgentRecord]) -> str:
    """The file's text for these agents."""
    return json.dumps(target_groups(records), indent=2) + "\n"


def write_atomically(path: Path, text: str) -> bool:
    """Replace `path` with `text` unless it already holds exactly that; True when written.

    Raises `OSError` (with nothing changed) when the folder is missing or not writable.
    """
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return True


def write_sd_file(path: Path, records: Iterable[AgentRecord]) -> bool:
    """Write the discovery file for the live ones among `records`; True when it changed."""
    return write_atomically(path, render(r for r in records if r.is_live()))
