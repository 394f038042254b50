"""The agent's first word on its backends: which found how many devices, which are not here.

One INFO line once every backend has opened or failed (or after a bound), e.g.
`backends: nvidia 8 devices; not present: amd, gaudi, neuron, tpu`. A backend
whose library fails where its hardware is gets a WARNING of its own as well
(exporter/runner.py); a backend not present on the host is only named here.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import BackendStatus

# How long the report waits for backends still opening before it names them as such.
REPORT_WITHIN_S = 10.0


def start_report(statuses: Sequence[BackendStatus], opening: Sequence[str]) -> str:
    """The report's text; `opening` names the backends that have not answered yet."""
    still_opening = set(opening)
    found = [f"{s.name} {s.device_count} device{'' if s.device_count == 1 else 's'}"
             for s in statuses if s.up]
    down = [s.name for s in statuses if not s.up and not s.absent
            and s.name not in still_opening]
    absent = [s.name for s in statuses if s.absent and s.name not in still_opening]
    parts = [f"backends: {', '.join(found) if found else 'no devices found'}"]
    if down:
        parts.append(f"down: {', '.join(down)}")
    if absent:
        parts.append(f"not present: {', '.join(absent)}")
    if still_opening:
        parts.append(f"still opening: {', '.join(sorted(still_opening))}")
    return "; ".join(parts)
