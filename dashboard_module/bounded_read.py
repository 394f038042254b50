"""Reads a whole HTTP answer's body, up to a limit, with aiohttp.

`StreamReader.read(n)` returns what has arrived so far (at most `n` bytes), not `n`
bytes: an answer larger than a few network reads comes back cut short by one call.
"""

from __future__ import annotations

import aiohttp


class BodyTooLarge(ValueError):
    """The answer's body is longer than the caller accepts."""


async def read_at_most(reply: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body of `reply`; `BodyTooLarge` once more than `limit` bytes arrive."""
    body = bytearray()
    while chunk := await reply.content.read(limit + 1 - len(body)):
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"larger than {limit // 2**20} MiB")
    return bytes(body)
