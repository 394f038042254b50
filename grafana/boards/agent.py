"""Agent health: are the agents scraped, their vendor libraries answering, their data fresh."""

from __future__ import annotations

from ray_accel.exporter import catalog as m

from ..promql import UP, matchers, metric
from . import uids
from .common import (
    BOARD_FILTERS,
    Board,
    Query,
    Section,
    label_variable,
    rate,
    selector,
    table,
    timeseries,
)

JOB_FILTER = 'job=~"$job"'
sel = selector(*BOARD_FILTERS, JOB_FILTER)
AGENT = "{{ray_node_id}} {{instance}}"


def board() -> Board:
    return Board(
        uid=uids.AGENT,
        title="Accelerators: agent health",
        description="The ray-accel agents themselves: scrapes, vendor backends, failed vendor "
                    "calls, sampling cycle time, data age, and the Ray attribution.",
        variables=[label_variable(
            "job", "job", metric(m.AGENT_INFO) + matchers(*BOARD_FILTERS),
            "The Prometheus job(s) the agents are scraped under.", multi=True, all_value=None,
            title="Scrape job")],
        sections=[
            Section("Agents", [
                timeseries("Scrape targets up", "1 while Prometheus scrapes the agent.",
                           Query(f"{UP}{matchers(JOB_FILTER)}", "{{instance}}"), low=0, high=1),
                table("Agents", "Each agent's version and settings.", Query(sel(m.AGENT_INFO)),
                      hidden=("SessionName", "Value")),
                timeseries("Backends up", "1 while the vendor library is loaded and answering.",
                           Query(sel(m.BACKEND_UP), AGENT + " {{backend}}"), low=0, high=1),
                timeseries("Devices found", "Devices each backend found.",
                           Query(sel(m.BACKEND_DEVICES), AGENT + " {{backend}}")),
            ]),
            Section("Sampling", [
                timeseries("Failed vendor calls", "Failed calls per second, by backend, error "
                           "kind and function.",
                           Query("sum by (ray_node_id, backend, kind, function) "
                                 f"({rate(sel(m.AGENT_ERRORS))})",
                                 "{{ray_node_id}} {{backend}} {{kind}} {{function}}")),
                timeseries("Cycle duration", "Wall time of the last sampling cycle.",
                           Query(sel(m.AGENT_CYCLE_DURATION), AGENT), unit="s"),
                timeseries("Cycles per second", "Sampling cycles completed per second.",
                           Query(rate(sel(m.AGENT_CYCLES)), AGENT)),
                timeseries("Sample age", "Seconds since each device was last read, and since "
                           "its slow-cadence values (error counters, link states: read every "
                           "--slow-read-interval), its rare-cadence ones (energy: every 3 slow "
                           "intervals) and its link byte counters (NVIDIA GPUs with GPM: when "
                           "due) were, as of that read.",
                           Query(sel(m.DEVICE_SAMPLE_AGE), "{{vendor}} {{index}} {{ray_node_id}}"),
                           Query(sel(m.SLOW_VALUES_AGE),
                                 "{{vendor}} {{index}} {{ray_node_id}} slow values"),
                           Query(sel(m.RARE_VALUES_AGE),
                                 "{{vendor}} {{index}} {{ray_node_id}} rare values"),
                           Query(sel(m.LINK_COUNTERS_AGE),
                                 "{{vendor}} {{index}} {{ray_node_id}} {{link_type}} counters"),
                           unit="s"),
            ]),
            Section("Ray attribution", [
                timeseries("Attribution sources up", "1 while the Ray source (discovery, "
                           "raylet, State API) answered the last refresh.",
                           Query(sel(m.ATTRIBUTION_UP), AGENT + " {{source}}"), low=0, high=1,
                           width=8),
                timeseries("Attribution age", "Seconds since the Ray attribution was refreshed.",
                           Query(sel(m.ATTRIBUTION_AGE), AGENT), unit="s", width=8),
                timeseries("Labels dropped", "Label values left out per second by the "
                           "cardinality guard (e.g. task ids beyond the cap).",
                           Query(rate(sel(m.ATTRIBUTION_DROPPED_LABELS)),
                                 AGENT + " {{label}}"), width=8),
                timeseries("Transfer listing age", "Seconds since the pairing agent listed "
                           "the cluster's actor tasks, which the transfer series are as of: "
                           "about the refresh interval, longer where the head's listings are "
                           "slow (the next waits ten times a listing's duration, 30 s at most).",
                           Query(sel(m.TRANSFER_LISTING_AGE), AGENT), unit="s", width=8),
            ]),
        ],
    )
