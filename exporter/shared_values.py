"""One shared object for each value that many node documents carry alike.

The head keeps the summaries of 10,000 nodes x 8 devices. Much of what a device
reports repeats across the fleet: model and state names, figures rounded to the
summary's resolution (a power in whole watts, a ratio in thousandths), and facts
such as the PCIe link or the NVLink fabric a device is on. `share()` makes each
distinct number and short string one stored object (containers stay their own,
holding shared members); `share_fact()` makes a whole repeated value (a dict or
list of such) one object. Both return values to be treated as read-only: the
head's views only read the documents they aggregate. The tables are bounded:
when one is full it starts over (values already shared stay shared), so a stream
of distinct values cannot grow it without end. Numbers are shared per type, so
1, 1.0 and True stay apart, and -0.0, NaN and infinities are left alone.
"""

from __future__ import annotations

import math
import sys
from typing import Any

MAX_NUMBERS = 1 << 16
MAX_FACTS = 1 << 14
# Longer strings are mostly ids (device and node UUIDs): unique, not worth interning.
MAX_SHARED_TEXT = 64

_floats: dict[float, float] = {}
_ints: dict[int, int] = {}
_facts: dict[Any, Any] = {}


def _number(table: dict[Any, Any], number: Any) -> Any:
    found = table.get(number)
    if found is None:
        if len(table) >= MAX_NUMBERS:
            table.clear()
        found = table[number] = number
    return found


def share(item: Any) -> Any:
    """`item` with its numbers and short strings (inside containers too) replaced by the
    one object each distinct value shares."""
    if isinstance(item, str):
        return sys.intern(item) if len(item) <= MAX_SHARED_TEXT else item
    if item is None or isinstance(item, bool):
        return item
    if isinstance(item, float):
        if not math.isfinite(item) or (item == 0.0 and math.copysign(1.0, item) < 0):
            return item
        return _number(_floats, item)
    if isinstance(item, int):
        return _number(_ints, item)
    if isinstance(item, dict):
        return {share(k): share(v) for k, v in item.items()}
    if isinstance(item, list):
        return [share(v) for v in item]
    return item


def _key(item: Any) -> Any:
    """A hashable key that tells apart values Python counts as equal (1, 1.0, True)."""
    if isinstance(item, dict):
        return (dict, tuple((k, _key(v)) for k, v in item.items()))
    if isinstance(item, list):
        return (list, tuple(_key(v) for v in item))
    return (type(item), item)


def share_fact(item: Any) -> Any:
    """The one object shared by every value equal to `item` (for values that repeat
    whole across devices: a PCIe link's generation and width, an NVLink fabric)."""
    item = share(item)
    if not isinstance(item, dict | list):
        return item
    try:
        key = _key(item)
        found = _facts.get(key)
    except TypeError:  # something unhashable inside
        return item
    if found is None:
        if len(_facts) >= MAX_FACTS:
            _facts.clear()
        found = _facts[key] = item
    return found
