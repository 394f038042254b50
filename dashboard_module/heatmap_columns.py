"""The heatmap as columns: every device of the cluster in one compact document.

`GET /accelerators/api/heatmap?form=columns` answers this instead of one object
per device (80,000 devices: about a tenth of the bytes, and no per-cell keys to
parse in the browser). Node columns run parallel (one entry per node); device
columns run parallel too, the devices of node 0 first, then node 1's, and so on,
`nodes.devices[i]` of them per node. Repeated strings (models, health, status)
are indices into small tables. See docs/api.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .aggregate import ClusterView
from .findings import DOWN, OK, STALE, WARNING
from .json_pieces import encode_in_pieces

# Device health by code; the code is the index.
HEALTH_CODES = (OK, WARNING, STALE, DOWN)
# Bits of the `flags` column.
ALLOCATED, IDLE, SPINNING = 1, 2, 4
# The placement keys the tab groups nodes by (exporter/placement.py).
GROUP_KEYS = ("nvlink_domain", "rack", "zone", "node_pool")
ENCODED_KEY = "heatmap.columns"


def _flags(cell: dict[str, Any]) -> int:
    return ((ALLOCATED if cell["allocated"] else 0) | (IDLE if cell["idle"] else 0)
            | (SPINNING if cell.get("spinning") else 0))


def _placement(view: ClusterView, node_id: str) -> dict[str, str]:
    state = view.nodes.get(node_id)
    return ((state.data or {}).get("placement") or {}) if state else {}


def columns_document(view: ClusterView) -> dict[str, Any]:
    """The view's heatmap in columns (the per-node form's content, placement added)."""
    rows = view.heatmap
    cells = [cell for row in rows for cell in row["devices"]]
    placements = [_placement(view, row["node_id"]) for row in rows]
    models: dict[str, int] = {}
    health_code = {name: code for code, name in enumerate(HEALTH_CODES)}
    nodes: dict[str, list[Any]] = {
        "node_id": [row["node_id"] for row in rows],
        "hostname": [row["hostname"] for row in rows],
        "status": [row["status"] for row in rows],
        "devices": [len(row["devices"]) for row in rows],
        "nvlink_domain": [row["nvlink_domain"] for row in rows],
        **{key: [p.get(key, "") for p in placements] for key in GROUP_KEYS[1:]},
    }
    devices: dict[str, list[Any]] = {
        "index": [cell["index"] for cell in cells],
        "model": [models.setdefault(cell["model"], len(models)) for cell in cells],
        "health": [health_code[cell["health"]] for cell in cells],
        **{column: [cell[column] for cell in cells] for column in ("util", "mem", "power",
                                                                    "temp")},
        "flags": [_flags(cell) for cell in cells],
    }
    return {"generated_at": view.generated_at, "form": "columns",
            "health": list(HEALTH_CODES), "models": list(models),
            "flags": {"allocated": ALLOCATED, "idle": IDLE, "spinning": SPINNING},
            "nodes": nodes, "devices": devices}


def columns_body(view: ClusterView, pause: Callable[[], None] = lambda: None) -> bytes:
    """The columns document as JSON, encoded once per view (in pieces with `pause()`
    between them: the collector encodes it beside the event loop)."""
    body = view.encoded.get(ENCODED_KEY)
    if body is None:
        body = view.encoded[ENCODED_KEY] = encode_in_pieces(columns_document(view), pause,
                                                            allow_nan=False)
    return body
