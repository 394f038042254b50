"""Synthetic fleets: many nodes' snapshot documents made from one real agent snapshot.

For tests and benchmarks of the aggregator at cluster scale (1000 nodes x 8
devices) without running 1000 agents: every copy gets its own Ray node id,
device UUIDs and (optionally) Ray job/actor ids, so nothing collides.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any


def _hex(seed: str, length: int) -> str:
    digest = hashlib.sha256(seed.encode()).hexdigest()
    while len(digest) < length:
        digest += hashlib.sha256(digest.encode()).hexdigest()
    return digest[:length]


def node_id(number: int) -> str:
    """A Ray-shaped node id (56 hex digits) for fleet member `number`."""
    return _hex(f"node-{number}", 56)


class Fleet:
    """Renders fleet members of one template as JSON text (what an agent would answer)."""

    def __init__(self, template: dict[str, Any]) -> None:
        base = copy.deepcopy(template)
        base.setdefault("node", {})["ray_node_id"] = _NODE_MARK
        base.setdefault("attribution", {})["node_id"] = _NODE_MARK
        self._uuids = [d["uuid"] for d in base.get("devices", ()) if d.get("uuid")]
        self._text = json.dumps(base, separators=(",", ":"))
        names = [*sorted(self._uuids, key=len, reverse=True), _NODE_MARK]
        self._pattern = re.compile("|".join(re.escape(n) for n in names))

    def text(self, number: int) -> str:
        ident = node_id(number)
        table = {uuid: f"GPU-{_hex(f'{number}-{uuid}', 8)}-{uuid[13:]}" for uuid in self._uuids}
        table[_NODE_MARK] = ident
        return self._pattern.sub(lambda match: table[match.group(0)], self._text)


_NODE_MARK = "@@node-id@@"


def fleet_member(template: dict[str, Any], number: int) -> dict[str, Any]:
    """A copy of `template` posing as node `number` of a fleet, with its own ids."""
    return json.loads(Fleet(template).text(number))


def fleet(template: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """`count` snapshot documents, one per synthetic node."""
    maker = Fleet(template)
    return [json.loads(maker.text(number)) for number in range(count)]
