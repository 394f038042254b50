"""One shared object for each value that many node documents carry alike.

The head keeps the summaries of 10,000 nodes x 8 devices. Most of what a device
reports is the same as on its neighbours: its PCIe generation and width, its
NVLink fabric's cluster and state, the rounded power, temperature and activity
figures, the model and state names. `share()` returns one stored object per
distinct value (numbers, strings, and dicts and lists made of them), so equal
values cost their memory once. What it returns must be treated as read-only:
the head's views only read the documents they aggregate. The table is bounded:
when full it starts over (values already shared stay shared, new ones get new
entries), so a stream of distinct values cannot grow it without end.
"""

from __future__ import annotations

import sys
from typing import Any

MAX_ENTRIES = 1 << 17
# Longer strings are mostly ids (device and node UUIDs): unique, not worth a table entry.
MAX_SHARED_TEXT = 64

_table: dict[Any, Any] = {}


def _key(item: Any) -> Any:
    """A hashable key that tells apart values Python counts as equal (1, 1.0, True)."""
    if isinstance(item, dict):
        return (dict, tuple((k, _key(v)) for k, v in item.items()))
    if isinstance(item, list):
        return (list, tuple(_key(v) for v in item))
    return (type(item), item)


def share(item: Any) -> Any:
    """The shared object equal to `item` (`item` itself the first time, or when it is
    not a kind of value worth sharing)."""
    if isinstance(item, str):
        return sys.intern(item) if len(item) <= MAX_SHARED_TEXT else item
    if item is None or isinstance(item, bool):
        return item
    if isinstance(item, dict):
        item = {share(k): share(v) for k, v in item.items()}
    elif isinstance(item, list):
        item = [share(v) for v in item]
    elif not isinstance(item, int | float):
        return item
    try:
        key = _key(item)
        found = _table.get(key)
    except TypeError:  # something unhashable inside
        return item
    if found is not None:
        return found
    if len(_table) >= MAX_ENTRIES:
        _table.clear()
    _table[key] = item
    return item
