"""JSON encoding in pieces, for large documents encoded beside the event loop.

`json.dumps` of a document with 80,000-element columns is one C call that holds
the GIL throughout (a tenth of a second or more): the event loop's thread cannot
answer a request meanwhile. `encode_in_pieces()` writes the same text from
pieces of at most `PIECE` list elements, calling `pause()` between them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

PIECE = 4096


def encode_in_pieces(document: Any, pause: Callable[[], None],
                     allow_nan: bool = True) -> bytes:
    """`json.dumps(document, separators=(",", ":"), allow_nan=allow_nan).encode()`,
    made in pieces with `pause()` between them."""
    out: list[str] = []
    _write(document, out, pause, allow_nan)
    return "".join(out).encode()


def _write(item: Any, out: list[str], pause: Callable[[], None], allow_nan: bool) -> None:
    if isinstance(item, dict):
        out.append("{")
        for number, (key, value) in enumerate(item.items()):
            if number:
                out.append(",")
            out.append((json.dumps(key) if isinstance(key, str) else  # as json.dumps keys
                        json.dumps({key: None}, separators=(",", ":"))[1:-6]) + ":")
            _write(value, out, pause, allow_nan)
        out.append("}")
    elif isinstance(item, list | tuple) and len(item) > PIECE:
        out.append("[")
        for start in range(0, len(item), PIECE):
            if start:
                out.append(",")
                pause()
            out.append(json.dumps(list(item[start:start + PIECE]), separators=(",", ":"),
                                  allow_nan=allow_nan)[1:-1])
        out.append("]")
    else:
        out.append(json.dumps(item, separators=(",", ":"), allow_nan=allow_nan))
