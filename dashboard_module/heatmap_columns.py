"""The heatmap as columns: every device of the cluster in one compact document.

`GET /accelerators/api/heatmap?form=columns` answers this instead of one object
per device (80,000 devices: about a tenth of the bytes, and no per-cell keys to
parse in the browser). Node columns run parallel (one entry per node); device
columns run parallel too, the devices of node 0 first, then node 1's, and so on,
`nodes.devices[i]` of them per node. Repeated strings (models, health, status)
are indices into small tables. See docs/api.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .content_coding import gzipped
from .findings import DOWN, OK, STALE, WARNING
from .json_encode import encode_compact

if TYPE_CHECKING:  # aggregate.py makes each node's share with row_columns()
    from .aggregate import ClusterView

# Device health by code; the code is the index.
HEALTH_CODES = (OK, WARNING, STALE, DOWN)
# Bits of the `flags` column.
ALLOCATED, IDLE, SPINNING, HOT = 1, 2, 4, 8
FLAG_BITS = {"allocated": ALLOCATED, "idle": IDLE, "spinning": SPINNING, "hot": HOT}
# The placement keys the tab groups nodes by (exporter/placement.py).
GROUP_KEYS = ("nvlink_domain", "rack", "zone", "node_pool")
ENCODED_KEY = "heatmap.columns"
GZIP_KEY = "heatmap.columns.gzip"


def _flags(cell: dict[str, Any]) -> int:
    return ((ALLOCATED if cell["allocated"] else 0) | (IDLE if cell["idle"] else 0)
            | (SPINNING if cell.get("spinning") else 0) | (HOT if cell.get("hot") else 0))


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
            "flags": FLAG_BITS,
            "nodes": nodes, "devices": devices}


NODE_COLUMNS = ("node_id", "hostname", "status", "devices", *GROUP_KEYS)
# The device columns a node's part encodes itself ("model" is an index into the view's
# model table, so it is made when the view's body is).
DEVICE_COLUMNS = ("index", "health", "util", "mem", "power", "temp", "flags")


@dataclass(frozen=True, slots=True)
class RowColumns:
    """One node's share of the columns form, encoded: each node column's entry and each
    device column's entries (comma-separated JSON), and its devices' models."""

    node: tuple[str, ...]
    devices: tuple[str, ...]
    models: tuple[str, ...]


def _encoded(items: list[Any]) -> str:
    return encode_compact(items)[1:-1].decode()


def row_columns(row: dict[str, Any], placement: dict[str, str]) -> RowColumns:
    """The columns-form share of one heatmap row (of a node placed at `placement`)."""
    cells = row["devices"]
    health_code = {name: code for code, name in enumerate(HEALTH_CODES)}
    node = (row["node_id"], row["hostname"], row["status"], len(cells), row["nvlink_domain"],
            *(placement.get(key, "") for key in GROUP_KEYS[1:]))
    devices = {"index": [cell["index"] for cell in cells],
               "health": [health_code[cell["health"]] for cell in cells],
               **{column: [cell[column] for cell in cells] for column in ("util", "mem",
                                                                           "power", "temp")},
               "flags": [_flags(cell) for cell in cells]}
    return RowColumns(tuple(_encoded([entry]) for entry in node),
                      tuple(_encoded(devices[column]) for column in DEVICE_COLUMNS),
                      tuple(cell["model"] for cell in cells))


def _model_entries(rows: list[RowColumns]) -> tuple[list[str], list[str]]:
    """The view's model table (in the order the cells name them first) and each row's
    model column entries."""
    table: dict[str, int] = {}
    made: dict[tuple[str, ...], str] = {}  # most nodes' devices are all of one model
    entries = []
    for row in rows:
        entry = made.get(row.models)
        if entry is None:
            entry = made[row.models] = ",".join(
                str(table.setdefault(model, len(table))) for model in row.models)
        entries.append(entry)
    return list(table), entries


def _column(entries: list[str]) -> str:
    return "[" + ",".join(entry for entry in entries if entry) + "]"


def _assembled(view: ClusterView, pause: Callable[[], None]) -> bytes:
    """columns_document(view) as JSON, joined from the rows' encoded shares."""
    # each node's share is made with its part, again only when the node changes
    rows = [part.columns for part in view.parts]
    pause()
    models, model_entries = _model_entries(rows)
    nodes = ",".join(f'"{name}":[' + ",".join(row.node[at] for row in rows) + "]"
                     for at, name in enumerate(NODE_COLUMNS))
    device_columns = dict(zip(DEVICE_COLUMNS, zip(*(row.devices for row in rows),
                                                   strict=True), strict=True)) if rows else \
        dict.fromkeys(DEVICE_COLUMNS, ())
    devices = [f'"index":{_column(list(device_columns["index"]))}',
               f'"model":{_column(model_entries)}',
               *(f'"{name}":{_column(list(device_columns[name]))}'
                 for name in DEVICE_COLUMNS[1:])]
    head = json.dumps({"generated_at": view.generated_at, "form": "columns",
                       "health": list(HEALTH_CODES), "models": models,
                       "flags": FLAG_BITS},
                      separators=(",", ":"), allow_nan=False)[:-1]
    return f'{head},"nodes":{{{nodes}}},"devices":{{{",".join(devices)}}}}}'.encode()


def columns_body(view: ClusterView, pause: Callable[[], None] = lambda: None) -> bytes:
    """The columns document as JSON, made once per view from each node's share, which is
    encoded once while the node stays the same (`pause()` is called between pieces: the
    collector makes it beside the event loop)."""
    body = view.encoded.get(ENCODED_KEY)
    if body is None:
        body = view.encoded[ENCODED_KEY] = _assembled(view, pause)
    return body


def columns_gzip(view: ClusterView, pause: Callable[[], None] = lambda: None) -> bytes:
    """columns_body(view) gzipped, made once per view."""
    body = view.encoded.get(GZIP_KEY)
    if body is None:
        body = view.encoded[GZIP_KEY] = gzipped(columns_body(view, pause))
    return body
