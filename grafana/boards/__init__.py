"""The boards, in the order their links list them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grafanalib._gen import DashboardEncoder

from ..provisioning import RAY_DEFAULT_DASHBOARD_UID
from . import agent, health, interconnect, node, overview, workload
from .common import Board

BOARDS: tuple[Callable[[], Board], ...] = (
    overview.board, node.board, workload.board, interconnect.board, health.board, agent.board,
)


def boards() -> list[Board]:
    """Every board definition."""
    return [build() for build in BOARDS]


def board_json(board: Board, ray_default_uid: str = RAY_DEFAULT_DASHBOARD_UID) -> dict[str, Any]:
    """A board as the JSON document Grafana provisions."""
    return json.loads(json.dumps(board.dashboard(ray_default_uid).to_json_data(),
                                 cls=DashboardEncoder))


def render(board: Board, ray_default_uid: str = RAY_DEFAULT_DASHBOARD_UID) -> str:
    """A board's JSON file text."""
    return json.dumps(board_json(board, ray_default_uid), indent=2, sort_keys=True) + "\n"
