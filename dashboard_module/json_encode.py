"""Encoding the view's answers as compact JSON: msgspec where it is installed.

Each changed node's heatmap row and its share of the columns form are encoded
once per change: at 10,000 new nodes (a head's first round) that is 160,000
small encodings, a third of a new node's view part with the json module and an
eighth of it with msgspec. Both give compact JSON that decodes to the same
values; msgspec writes non-ASCII characters as UTF-8 rather than \\u escapes,
exponents without "+" (1e16), and a NaN or an infinity as null (absent) where
the json module would write a literal no JSON parser accepts.
"""

from __future__ import annotations

import json
import math
from typing import Any

try:
    import msgspec
except ImportError:  # the dashboard works without it, only slower
    msgspec = None  # type: ignore[assignment]

_encoder = msgspec.json.Encoder() if msgspec is not None else None


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def encode_compact(value: Any) -> bytes:
    """`value` as compact JSON (UTF-8); a non-finite float is written as null."""
    if _encoder is not None:
        return _encoder.encode(value)
    return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False,
                      ensure_ascii=False).encode()
