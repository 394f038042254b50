"""What every board shares: the data source, template variables, filters, links, panels, layout.

Boards are written as `Board(... sections=[Section(title, [panels])])`; this
module turns that into a grafanalib `Dashboard` laid out on Grafana's 24-column
grid, with the variables Ray's own boards use (`datasource`, `SessionName`,
`Cluster`) plus `node`, and links to the other boards and to Ray's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
from grafanalib.core import (
    SHOW,
    Dashboard,
    DashboardLink,
    GridPos,
    Panel,
    RowPanel,
    Stat,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

from ray_accel.exporter import catalog as m

from ..promql import (  # noqa: F401 (the filters are the boards' names for them)
    BOARD_FILTERS,
    CLUSTER_FILTER,
    NODE_FILTER,
    SESSION_FILTER,
    Selector,
    matchers,
    metric,
    selector,
)
from ..provisioning import RAY_DEFAULT_DASHBOARD_UID

DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
TAG = "ray-accel"
GRID_WIDTH = 24
RATE = "$__rate_interval"
RANGE = "$__range"

sel = selector(*BOARD_FILTERS)


def rate(selected: str, window: str = RATE) -> str:
    """Per-second rate of a counter selector."""
    return f"rate({selected}[{window}])"


def increase(selected: str, window: str = RATE) -> str:
    """Increase of a counter selector over a window."""
    return f"increase({selected}[{window}])"


# ------------------------------------------------------------------ variables


@attr.s
class PrometheusVariable(Template):
    """A query variable written the way Grafana 9+ (and Ray's boards) store it."""

    description = attr.ib(default="")

    def to_json_data(self) -> dict[str, Any]:
        data = super().to_json_data()
        data.update(definition=self.query, description=self.description,
                    query={"query": self.query, "refId": "StandardVariableQuery"})
        return data


def datasource_variable() -> Template:
    return Template(name="datasource", label="Data source", query="prometheus",
                    type="datasource", hide=SHOW)


def label_variable(name: str, label: str, source: str, description: str, *,
                   multi: bool = False, all_value: str | None = ".*",
                   title: str | None = None) -> Template:
    """A variable whose values are the values of `label` on the series `source`."""
    return PrometheusVariable(
        name=name, label=title or name, query=f"label_values({source}, {label})",
        dataSource=DATASOURCE, includeAll=True, multi=multi, allValue=all_value,
        refresh=2, sort=2 if name == "SessionName" else 1, description=description)


def standard_variables() -> list[Template]:
    """`datasource`, `Cluster`, `SessionName`, `node`: the first three as Ray's boards have them."""
    info = metric(m.AGENT_INFO)
    return [
        datasource_variable(),
        label_variable("Cluster", "ray_io_cluster", info,
                       "The Ray cluster (label ray_io_cluster, set by KubeRay's PodMonitor)."),
        label_variable("SessionName", "SessionName", info + matchers(CLUSTER_FILTER),
                       "The Ray session (one per `ray start --head`)."),
        label_variable("node", "ray_node_id", info + matchers(SESSION_FILTER, CLUSTER_FILTER),
                       "Ray nodes, by node id.", multi=True, title="Node"),
    ]


# ------------------------------------------------------------------ queries and panels


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel; `table` makes it an instant query in table format."""

    expr: str
    legend: str = ""
    table: bool = False

    def target(self, ref_id: str) -> Target:
        return Target(expr=self.expr, legendFormat=self.legend, refId=ref_id,
                      instant=self.table, format="table" if self.table else "time_series",
                      datasource=DATASOURCE, intervalFactor=1)


@dataclass(frozen=True)
class Sized:
    """A panel and the grid cells it takes."""

    panel: Panel
    width: int = 12
    height: int = 8


BASE_THRESHOLD = [{"color": "green", "value": None}]


def _targets(queries: Sequence[Query]) -> list[Target]:
    return [q.target(chr(ord("A") + i)) for i, q in enumerate(queries)]


def timeseries(title: str, description: str, *queries: Query, unit: str = "short",
               width: int = 12, height: int = 8, stacked: bool = False, bars: bool = False,
               low: int | None = None, high: int | None = None) -> Sized:
    """A time-series panel."""
    panel = TimeSeries(
        title=title, description=description, dataSource=DATASOURCE, targets=_targets(queries),
        unit=unit, valueMin=low, valueMax=high, legendDisplayMode="table",
        legendPlacement="right" if width >= 16 else "bottom", legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi", tooltipSort="desc", drawStyle="bars" if bars else "line",
        fillOpacity=60 if bars else 10, stacking={"mode": "normal"} if stacked else {},
        maxDataPoints=None, thresholds=BASE_THRESHOLD)
    return Sized(panel, width, height)


def stat(title: str, description: str, query: Query, unit: str = "short",
         width: int = 4, height: int = 4, warn_above: float | None = None) -> Sized:
    """A single-number panel; red above `warn_above` when given."""
    steps = list(BASE_THRESHOLD)
    if warn_above is not None:
        steps.append({"color": "red", "value": warn_above})
    panel = Stat(title=title, description=description, dataSource=DATASOURCE,
                 targets=_targets([query]), format=unit, reduceCalc="lastNotNull",
                 thresholds=steps, graphMode="area", colorMode="value", maxDataPoints=None)
    return Sized(panel, width, height)


def table(title: str, description: str, *queries: Query, width: int = 24, height: int = 8,
          hidden: Sequence[str] = (), names: dict[str, str] | None = None,
          links: Sequence[dict[str, Any]] = (), matrix: dict[str, str] | None = None,
          unit: str = "") -> Sized:
    """A table of instant queries, merged on their labels.

    `hidden` columns are left out (Time, __name__, job and instance always are),
    `names` renames columns (e.g. "Value #A" -> "Share"), `links` are data links
    on every cell, `matrix` pivots rows x columns (Grafana's grouping to matrix).
    """
    queries = tuple(Query(q.expr, q.legend, table=True) for q in queries)
    transformations: list[dict[str, Any]] = []
    if len(queries) > 1:
        transformations.append({"id": "merge", "options": {}})
    if matrix:
        transformations.append({"id": "groupingToMatrix", "options": matrix})
    else:
        exclude = {name: True for name in ("Time", "__name__", "job", "instance", *hidden)}
        transformations.append({"id": "organize", "options": {
            "excludeByName": exclude, "renameByName": dict(names or {})}})
    panel = Table(title=title, description=description, dataSource=DATASOURCE,
                  targets=_targets(queries), transformations=transformations, unit=unit,
                  filterable=True, maxDataPoints=None, thresholds=BASE_THRESHOLD,
                  extraJson={"fieldConfig": {"defaults": {"links": list(links)}}})
    return Sized(panel, width, height)


# ------------------------------------------------------------------ links


def board_link(uid: str, title: str, *params: str) -> dict[str, Any]:
    """A data link to another of our boards, keeping the time range and Ray's variables."""
    query = "&".join(("${__url_time_range}", "${datasource:queryparam}",
                      "${Cluster:queryparam}", "${SessionName:queryparam}", *params))
    return {"title": title, "url": f"/d/{uid}?{query}"}


def board_links(ray_default_uid: str) -> list[DashboardLink]:
    """The links at the top of every board: our boards (by tag) and Ray's default board."""
    return [
        DashboardLink(type="dashboards", tags=[TAG], asDropdown=True, title="Accelerator boards",
                      includeVars=True, keepTime=True),
        DashboardLink(type="link", uri=f"/d/{ray_default_uid}", title="Ray: default dashboard",
                      icon="dashboard", includeVars=True, keepTime=True,
                      tooltip="Ray's own metrics for the same session and cluster"),
    ]


# ------------------------------------------------------------------ boards


@dataclass(frozen=True)
class Section:
    """A row of the board: a title and panels flowing left to right."""

    title: str
    panels: Sequence[Sized]
    collapsed: bool = False


@dataclass(frozen=True)
class Board:
    """One board: what it is for, its extra variables and filters, its sections."""

    uid: str
    title: str
    description: str
    sections: Sequence[Section]
    variables: Sequence[Template] = field(default_factory=tuple)

    def dashboard(self, ray_default_uid: str = RAY_DEFAULT_DASHBOARD_UID) -> Dashboard:
        """The grafanalib dashboard, laid out, with variables and links."""
        return Dashboard(
            title=self.title, uid=self.uid, description=self.description, tags=[TAG],
            panels=_layout(self.sections), links=board_links(ray_default_uid),
            templating=Templating(list=[*standard_variables(), *self.variables]),
            time=Time("now-1h", "now"), refresh="30s", timezone="browser",
            graphTooltip=1, schemaVersion=39, editable=True,
        ).auto_panel_ids()


def _layout(sections: Sequence[Section]) -> list[Panel]:
    """Grid positions: each section a row header, then its panels wrapped at 24 columns."""
    placed: list[Panel] = []
    y = 0
    for section in sections:
        row = RowPanel(title=section.title, gridPos=GridPos(h=1, w=GRID_WIDTH, x=0, y=y),
                       collapsed=section.collapsed)
        y += 1
        x, row_height, inside = 0, 0, []
        for sized in section.panels:
            if x + sized.width > GRID_WIDTH:
                x, y, row_height = 0, y + row_height, 0
            inside.append(attr.evolve(sized.panel, gridPos=GridPos(h=sized.height, w=sized.width,
                                                                  x=x, y=y)))
            x += sized.width
            row_height = max(row_height, sized.height)
        y += row_height
        if section.collapsed:
            placed.append(attr.evolve(row, panels=inside))
        else:
            placed.extend([row, *inside])
    return placed
