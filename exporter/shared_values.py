"""One shared object for each value that many node documents carry alike.

The head keeps the summaries of 10,000 nodes x 8 devices. Much of what a device
reports repeats across the fleet: model and state names, figures rounded to the
summary's resolution (a power in whole watts, a ratio in thousandths), and facts
such as the PCIe link or the NVLink fabric a device is on. `share()` makes each
distinct number and short string one stored object (a dict or list stays its
own, holding shared members); `share_fact()` makes a whole repeated value (a dict
or list of scalars and lists of scalars) one object. Both return values to be
treated as read-only: the head's views only read the documents they aggregate.
The tables are bounded: when one is full it starts over (values already shared
stay shared), so a stream of distinct values cannot grow it without end. Numbers
are shared per type, so 1, 1.0 and True stay apart, and -0.0, NaN and infinities
are left alone.
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


def _new_float(item: float) -> float:
    if not math.isfinite(item) or (item == 0.0 and math.copysign(1.0, item) < 0):
        return item
    return _number(_floats, item)


def _scalar(item: Any) -> Any:
    kind = type(item)  # exact types: bool is not int here, nor a float subclass a float
    if kind is float:
        # The common case first: a value met before (-0.0 finds 0.0, and is kept apart).
        found = _floats.get(item)
        if found is not None and (found or math.copysign(1.0, item) > 0):
            return found
        return _new_float(item)
    if kind is str:
        return sys.intern(item) if len(item) <= MAX_SHARED_TEXT else item
    if kind is int:
        found = _ints.get(item)
        return found if found is not None else _number(_ints, item)
    return item


def share(item: Any) -> Any:
    """`item` with its numbers and short strings (and those of a dict or list it is, one
    level down) replaced by the one object each distinct value shares."""
    kind = type(item)
    if kind is dict:  # keys: the JSON documents' object keys, strings
        return {sys.intern(k) if type(k) is str else k: _scalar(v) for k, v in item.items()}
    if kind is list:
        return [_scalar(v) for v in item]
    return _scalar(item)


def _fact_key(item: dict[Any, Any] | list[Any]) -> tuple[Any, ...]:
    """A hashable key that tells apart values Python counts as equal (1, 1.0, True);
    TypeError for a member that is neither a scalar nor a list of scalars."""
    pairs = item.items() if type(item) is dict else enumerate(item)
    return (type(item), *((k, type(v), tuple(v) if type(v) is list else v)
                          for k, v in pairs))


def share_fact(item: Any) -> Any:
    """The one object shared by every value equal to `item` (for values that repeat
    whole across devices: a PCIe link's generation and width, an NVLink fabric)."""
    item = share(item)
    if type(item) is not dict and type(item) is not list:
        return item
    try:
        key = _fact_key(item)
        found = _facts.get(key)
    except TypeError:  # a member that is a dict, or a list holding one
        return item
    if found is None:
        if len(_facts) >= MAX_FACTS:
            _facts.clear()
        found = _facts[key] = item
    return found
