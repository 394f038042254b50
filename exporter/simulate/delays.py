"""Playing a `delays` rule in the Python fakes (amdsmi, pyhlml), as the fake NVML plays it in C.

A rule's `seconds` are slept, or with `"busy": true` spent on the calling
thread's CPU (spinning until its CPU clock has advanced that much), like driver
calls that work on the CPU: a benchmark on a recorded node's replay then costs
what the node cost. Callers hold no lock while a delay plays.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def spend_cpu(seconds: float) -> None:
    """Spin until this thread has spent `seconds` more of CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def pass_delay(rule: Mapping[str, Any] | None) -> None:
    """Wait out a normalized delay rule (None or 0 s: nothing)."""
    if rule is None or rule["seconds"] <= 0:
        return
    if rule.get("busy"):
        spend_cpu(rule["seconds"])
    else:
        time.sleep(rule["seconds"])
