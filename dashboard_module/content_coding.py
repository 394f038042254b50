"""gzip for the API's large bodies: made once per view, sent to clients that accept it.

The heatmap's columns form is about 350 bytes a node (3.5 MB at 10,000 nodes, every
refresh, to every open tab); gzip at its fastest level makes it about a quarter of
that in roughly 3.5 ms of the parsing thread's CPU per 1,000 nodes, which zlib spends
without holding the interpreter.
"""

from __future__ import annotations

import zlib

# zlib's fastest level: the body is made again every round, so speed counts more than
# the last few percent of size.
GZIP_LEVEL = 1
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around the deflate stream


def gzipped(body: bytes) -> bytes:
    """`body` as a gzip member (no name or time in its header: the same body, the same
    bytes)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(body) + compressor.flush()


def _quality(parameters: list[str]) -> float:
    """The `q` weight among a coding's parameters (1 when absent, 0 when malformed)."""
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            try:
                weight = float(value.strip())
            except ValueError:
                return 0.0
            return weight if 0.0 <= weight <= 1.0 else 0.0
    return 1.0


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether a request's `Accept-Encoding` lets the answer be gzip (RFC 9110 12.5.3):
    `gzip` or `x-gzip` with a non-zero weight, or `*` with one when gzip is not named."""
    if not accept_encoding:
        return False
    named: float | None = None
    anything: float | None = None
    for item in accept_encoding.split(","):
        coding, *parameters = item.split(";")
        coding = coding.strip().lower()
        if coding in ("gzip", "x-gzip"):
            named = max(named or 0.0, _quality(parameters))
        elif coding == "*":
            anything = _quality(parameters)
    if named is not None:
        return named > 0.0
    return anything is not None and anything > 0.0
