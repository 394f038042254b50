"""The generated Grafana boards: up to date, catalog names only, Ray-compatible variables, links.

The queries themselves run against a real Prometheus in test_grafana_prometheus.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import ray.dashboard.modules.metrics.dashboards as ray_dashboards
import yaml

from ray_accel.exporter import catalog as m
from ray_accel.exporter.catalog import CATALOG
from ray_accel.grafana import generate, queries
from ray_accel.grafana.alerts.rules import all_rules
from ray_accel.grafana.boards import uids
from ray_accel.grafana.boards.common import BOARD_FILTERS, TAG
from ray_accel.grafana.promql import TOP_LEVEL, UP, duration, metric, parse_duration
from ray_accel.grafana.provisioning import RAY_DEFAULT_DASHBOARD_UID

BOARD_FILES = sorted((generate.GENERATED_DIR / "dashboards").glob("*.json"))
BOARDS = [json.loads(path.read_text()) for path in BOARD_FILES]
CATALOG_NAMES = {spec.prometheus_name for spec in CATALOG}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    expr = re.sub(r"\{[^}]*\}", "", expr)  # matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range windows
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    return {name for name, call in re.findall(r"\b([a-zA-Z_:][\w:]*)\b\s*(\(?)", expr)
            if not call and name.lower() not in KEYWORDS}


def all_panel_queries() -> list[queries.PanelQuery]:
    return [q for board in BOARDS for q in queries.panel_queries(board)]


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels") or [])
    return found


def test_generated_files_are_up_to_date():
    assert generate.stale() == [], "generated Grafana/alert files are stale: run `make grafana`"


def test_one_board_per_view():
    assert {b["uid"] for b in BOARDS} == {uids.OVERVIEW, uids.NODE, uids.WORKLOAD,
                                         uids.INTERCONNECT, uids.HEALTH, uids.AGENT}
    assert all(TAG in b["tags"] for b in BOARDS)


def test_metric_name_extraction():
    assert metric_names('sum by (index) (rate(hw_gpu_io_bytes_total{link_type!="pcie"}'
                        '[$__rate_interval])) > 0 and ignoring(task) up offset 5m') == {
        "hw_gpu_io_bytes_total", "up"}


def test_queries_name_only_catalog_metrics():
    used = {q.expr: metric_names(q.expr) for q in all_panel_queries()}
    used.update({v.selector: metric_names(v.selector)
                 for board in BOARDS for v in queries.variable_queries(board)})
    used.update({r.expr: metric_names(r.expr) for r in all_rules()})
    unknown = {expr: names - CATALOG_NAMES - {UP} for expr, names in used.items()
               if names - CATALOG_NAMES - {UP}}
    assert unknown == {}
    assert all(names for names in used.values())


def test_every_catalog_metric_is_on_a_board():
    shown = set().union(*(metric_names(q.expr) for q in all_panel_queries()))
    assert CATALOG_NAMES - shown == set()


def test_every_selector_applies_the_board_filters():
    for query in all_panel_queries():
        for name, matchers in re.findall(r"\b([a-zA-Z_:][\w:]*)\{([^}]*)\}", query.expr):
            if name == UP:
                continue
            missing = [f for f in BOARD_FILTERS if f not in matchers]
            assert not missing, f"{query.board} / {query.panel}: {name} lacks {missing}"


def test_sums_of_memory_power_and_energy_take_top_level_devices_only():
    """A MIG instance's or NeuronCore's memory and power are in its GPU's figures: a sum
    over devices that took the parts too would count them twice. Counts are not filtered."""
    summed = {metric(name) for name in (m.MEMORY_USAGE, m.MEMORY_LIMIT, m.POWER, m.ENERGY)}
    checked = 0
    for query in all_panel_queries():
        if not re.search(r"\b(sum|avg)\b", query.expr):
            continue
        for name, matchers in re.findall(r"\b([a-zA-Z_:][\w:]*)\{([^}]*)\}", query.expr):
            if name in summed:
                checked += 1
                assert TOP_LEVEL in matchers, f"{query.board} / {query.panel}: {query.expr}"
    assert checked >= 8  # overview: memory in use (stat, table, by node), power, energy
    counts = [q.expr for q in all_panel_queries() if q.panel == "Devices"]
    assert counts and all(TOP_LEVEL not in expr for expr in counts)


def test_variables_are_rays_plus_node():
    ray_base = json.loads((Path(ray_dashboards.__file__).parent /
                           "default_grafana_dashboard_base.json").read_text())
    ray_names = {v["name"] for v in ray_base["templating"]["list"]}
    assert {"datasource", "SessionName", "Cluster"} <= ray_names
    for board in BOARDS:
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert list(variables)[:4] == ["datasource", "Cluster", "SessionName", "node"]
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        assert "ray_io_cluster" in variables["Cluster"]["definition"]
        assert "ray_node_id" in variables["node"]["definition"]
        for variable in queries.variable_queries(board):
            assert variables[variable.name]["datasource"]["uid"] == "${datasource}"


def test_every_panel_reads_the_chosen_datasource():
    for board in BOARDS:
        for panel in _panels(board):
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], f"{board['uid']} / {panel['title']} has no query"
            assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])


def test_layout_fits_the_grid_without_overlaps():
    for board in BOARDS:
        panels = _panels(board)
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), board["uid"]
        cells: dict[tuple[int, int], str] = {}
        for panel in panels:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
            for x in range(pos["x"], pos["x"] + pos["w"]):
                for y in range(pos["y"], pos["y"] + pos["h"]):
                    assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                    cells[(x, y)] = panel["title"]


def test_boards_link_to_each_other_and_to_rays_default_board():
    known = {b["uid"] for b in BOARDS}
    for board in BOARDS:
        links = board["links"]
        assert {"type": "dashboards", "tags": [TAG]}.items() <= links[0].items()
        assert links[1]["url"] == f"/d/{RAY_DEFAULT_DASHBOARD_UID}"
        assert all(link["includeVars"] and link["keepTime"] for link in links)
        for panel in _panels(board):
            for link in panel.get("fieldConfig", {}).get("defaults", {}).get("links", []):
                target = re.match(r"/d/([\w-]+)\?", link["url"])
                assert target and target.group(1) in known, link
                assert "${SessionName:queryparam}" in link["url"]


def test_ray_default_board_uid_is_configurable(tmp_path):
    from ray_accel.grafana.cli import RAY_DEFAULT_UID_ENV
    from ray_accel.grafana.generate import board_files

    assert RAY_DEFAULT_UID_ENV == "RAY_GRAFANA_DEFAULT_DASHBOARD_UID"  # Ray's own override
    board = json.loads(next(iter(board_files("myRayBoard").values())))
    assert board["links"][1]["url"] == "/d/myRayBoard"


def test_provider_file_loads_the_boards_into_rays_folder():
    provider = yaml.safe_load((generate.GENERATED_DIR / generate.PROVIDER).read_text())
    (only,) = provider["providers"]
    assert only["folder"] == "Ray" and only["type"] == "file"
    assert only["options"]["path"] == generate.DEFAULT_DASHBOARDS_PATH


def test_expand_fills_variables_and_refuses_unknown_ones():
    expr = 'rate(x{node=~"$node",s=~"${SessionName}"}[$__rate_interval])'
    assert queries.expand(expr, {"node": "n1", "SessionName": "s1"}) == \
        'rate(x{node=~"n1",s=~"s1"}[30s])'
    with pytest.raises(KeyError, match="node"):
        queries.expand(expr, {})


@pytest.mark.parametrize(("text", "seconds"), [("15m", 900), ("90s", 90), ("1h30m", 5400),
                                               ("2", 2), ("250ms", 0.25), ("1d", 86400)])
def test_durations_round_trip(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "abc", "5x", "-1", "0", "m"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)
