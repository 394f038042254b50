"""Checks that an agent's summary devices hold what the summary's writer puts in them.

The head keeps each node's summary and builds every cluster view from all of them
at once; a device field of another type (a number sent as text, a list where a
map goes) would stop that build for the whole cluster, and a number that is not
finite would be shown or aggregated as if it were one. `check_device` finds such
a field; the head then treats the node's answer as malformed (the node is marked
unreachable with why, its last good summary kept), so a bad agent costs only its
own node. Fields the head does not know are left to it to ignore (a newer agent).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from . import catalog as m

Check = Callable[[Any], bool]


class BadField(ValueError):
    """A summary field whose value is not of the field's kind; the message names it."""


# The exact types (as JSON decoders make them) of a field that holds one plain value; a
# float among them must also be finite. A field of any other form has a check of its own.
Kind = frozenset[type] | Check
_TEXT = frozenset({str})
_FLAG = frozenset({bool})
_NUMBER = frozenset({int, float, type(None)})
_FINITE = frozenset({int, float})
_INTEGER = frozenset({int})


class _Record:
    """A mapping whose known keys hold values of their kinds (other keys are ignored)."""

    def __init__(self, kinds: Mapping[str, Kind]) -> None:
        self._plain = {k: v for k, v in kinds.items() if isinstance(v, frozenset)}
        self._other = {k: v for k, v in kinds.items() if not isinstance(v, frozenset)}

    def first_bad(self, item: Mapping[str, Any]) -> str | None:
        """The first key of `item` (a dict) whose value is not of its kind, or None."""
        plain, other, isfinite = self._plain.get, self._other.get, math.isfinite
        for key, value in item.items():
            types = plain(key)
            if types is not None:  # the common case, checked here rather than in a call
                kind = value.__class__
                if kind not in types or (kind is float and not isfinite(value)):
                    return key
            else:
                check = other(key)
                if check is not None and not check(value):
                    return key
        return None

    def __call__(self, item: Any) -> bool:
        return item.__class__ is dict and self.first_bad(item) is None


def _optional(check: Check) -> Check:
    return lambda item: item is None or check(item)


def _map_of(types: frozenset[type]) -> Check:
    def check(item: Any) -> bool:
        if item.__class__ is not dict:
            return False
        for key, value in item.items():
            kind = value.__class__
            if key.__class__ is not str or kind not in types or (
                    kind is float and not math.isfinite(value)):
                return False
        return True
    return check


def _list_of(check: Check) -> Check:
    return lambda item: item.__class__ is list and all(check(value) for value in item)


def _text_list(item: Any) -> bool:
    return item.__class__ is list and all(value.__class__ is str for value in item)


_IDENTITY: dict[str, Kind] = {**dict.fromkeys(m.RAY_LABELS, _TEXT), "pid": _INTEGER}

# Each device field the summary's writer (exporter/sinks/summary.py) may send, and its kind.
DEVICE = _Record({
    **dict.fromkeys(("uuid", "index", "vendor", "model", "pci_bus_id", "parent_uuid",
                     "nvlink_domain", "temperature_sensor"), _TEXT),
    **dict.fromkeys(("up", "stale"), _FLAG),
    "collective_suspected_stall": frozenset({bool, type(None)}),
    **dict.fromkeys(("age_s", "utilization", "memory_bandwidth_utilization",
                     "memory_used_bytes", "memory_reserved_bytes", "memory_total_bytes",
                     "power_watts", "power_limit_watts", "temperature_celsius", "sm_clock_hz",
                     "sm_clock_max_hz", "spinning", "ecc_corrected", "ecc_uncorrected",
                     "pcie_replays", "row_remap_pending", "row_remap_failure", "allocated"),
                    _NUMBER),
    **dict.fromkeys(("activity", "pipe_activity", "xid_errors"), _map_of(_FINITE)),
    **dict.fromkeys(("facts", "errors"), _map_of(_TEXT)),
    "throttle_reasons": _text_list,
    "pcie": _map_of(_NUMBER),
    "fabric": _optional(_Record({
        **dict.fromkeys(("state", "status", "health_summary"), _NUMBER),
        "issues": _text_list,
        **dict.fromkeys(("state_name", "status_name", "health_summary_name",
                         "incorrect_configuration", "cluster_uuid", "clique_id"), _TEXT),
    })),
    "peers": _list_of(_Record(dict.fromkeys(("uuid", "index", "connection", "p2p"), _TEXT))),
    "holders": _list_of(_Record({
        **_IDENTITY, "fraction": _FINITE, "idle": _FLAG, "spinning": _FLAG,
        "idle_rule": _TEXT, "shared": _FLAG,
    })),
    "processes": _list_of(_Record({
        **_IDENTITY, "memory_bytes": _NUMBER, "sm_utilization": _NUMBER,
    })),
    "links": _list_of(_Record({
        "link_type": _TEXT, "index": _INTEGER, "up": frozenset({bool, type(None)}),
        **dict.fromkeys(("transmit_bytes_per_s", "receive_bytes_per_s", "errors"), _NUMBER),
        **dict.fromkeys(("version", "remote_type", "peer_uuid"), _TEXT),
    })),
})


def check_device(device: Any) -> None:
    """Raises `BadField` naming the first field of `device` (a summary device) whose value
    is not of its kind; a device that is not a mapping is one."""
    if device.__class__ is not dict:
        raise BadField(f"a device is {type(device).__name__}, not a mapping")
    bad = DEVICE.first_bad(device)
    if bad is not None:
        raise BadField(f"device field {bad} holds {_shown(device[bad])}")


def _shown(item: Any) -> str:
    """A short description of a bad value (its type, and the value if short)."""
    text = repr(item)
    return f"{type(item).__name__} {text}" if len(text) <= 40 else type(item).__name__
