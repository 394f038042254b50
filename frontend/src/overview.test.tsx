import { afterEach, describe, expect, it } from "vitest";
import { cleanup, fireEvent, render, screen } from "@testing-library/react";
import type { HeatCell, HeatNode } from "./api";
import { DeviceOverview, canvasFill } from "./components/DeviceOverview";
import { GroupList } from "./components/GroupList";
import { HEALTH_COLORS } from "./format";
import {
  attentionRank, decodeColumns, findNodes, focusCounts, overviewGroups,
  type HeatColumns,
} from "./overview";
import { MAX_CELL, MIN_CELL, READABLE_CELL, hitTest, layoutOverview } from "./overviewLayout";
import { Devices } from "./views/Cluster";

afterEach(cleanup);

function cell(index: number, over: Partial<HeatCell> = {}): HeatCell {
  return { uuid: `u${index}`, index: String(index), model: "NVIDIA H200", health: "ok",
           util: 0.5, mem: 0.5, power: 500, temp: 60, allocated: false, idle: false,
           spinning: false, ...over };
}

function node(id: string, cells: HeatCell[], placement: Record<string, string> = {}): HeatNode {
  return { node_id: id, hostname: id, status: "ok", nvlink_domain: placement.nvlink_domain ?? "",
           devices: cells, placement: { nvlink_domain: "", rack: "", zone: "", node_pool: "",
                                        ...placement } };
}

const calm = (id: string, placement: Record<string, string> = {}, util = 0.5) =>
  node(id, Array.from({ length: 8 }, (_, i) => cell(i, { util })), placement);

describe("the columns form", () => {
  it("decodes into nodes with their cells, flags and placement", () => {
    const doc: HeatColumns = {
      generated_at: 1, form: "columns", health: ["ok", "warning", "stale", "down"],
      models: ["NVIDIA H200", "MI300X"], flags: { allocated: 1, idle: 2, spinning: 4, hot: 8 },
      nodes: { node_id: ["a", "b"], hostname: ["ha", "hb"], status: ["ok", "stale"],
               devices: [2, 1], nvlink_domain: ["d1", ""], rack: ["r1", "r2"],
               zone: ["z", "z"], node_pool: ["train", "serve"] },
      devices: { index: ["0", "1", "0"], model: [0, 0, 1], health: [0, 3, 2],
                 util: [0.9, null, 0.1], mem: [0.5, null, 0.2], power: [600, null, 90],
                 temp: [70, null, 40], flags: [3, 0, 13] },
    };
    const [a, b] = decodeColumns(doc);
    expect(a.placement).toEqual({ nvlink_domain: "d1", rack: "r1", zone: "z", node_pool: "train" });
    expect(a.devices.map((c) => [c.index, c.health, c.util, c.allocated, c.idle]))
      .toEqual([["0", "ok", 0.9, true, true], ["1", "down", null, false, false]]);
    expect(b.devices).toHaveLength(1);
    expect(b.devices[0]).toMatchObject({ model: "MI300X", health: "stale", spinning: true,
                                         allocated: true, idle: false, hot: true });
    expect(a.devices.map((c) => c.hot)).toEqual([false, false]);
  });
});

describe("the order of attention", () => {
  it("puts down, spinning, idle, hot, stale and warning devices first, in that order", () => {
    const ranks = [
      cell(0, { health: "down", util: null, temp: null }),
      cell(1, { spinning: true }),
      cell(2, { allocated: true, idle: true }),
      cell(3, { hot: true }),
      cell(4, { health: "stale" }),
      cell(5, { health: "warning" }),
      cell(6),
    ].map(attentionRank);
    expect(ranks).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(attentionRank(cell(7, { temp: 99 }))).toBe(6); // the head judges heat, not the page
    expect(attentionRank(cell(8, { hot: true, health: "down" }))).toBe(0);
  });
  it("orders groups, nodes and each node's devices by it", () => {
    const nodes = [
      calm("quiet", { rack: "r1" }, 0.2),
      calm("busy", { rack: "r1" }, 0.9),
      node("spinner", [cell(0), cell(1, { spinning: true })], { rack: "r2" }),
      node("lost", [cell(0), cell(1, { temp: 90, hot: true }), cell(2, { health: "down", util: null })],
           { rack: "r3" }),
      node("twice", [cell(0, { spinning: true }), cell(1, { spinning: true })], { rack: "r2" }),
    ];
    const groups = overviewGroups(nodes, "rack", "all");
    expect(groups.map((g) => g.key)).toEqual(["r3", "r2", "r1"]);
    expect(groups[1].nodes.map((n) => n.node.node_id)).toEqual(["twice", "spinner"]);
    expect(groups[0].nodes[0].cells.map((c) => c.index)).toEqual(["2", "1", "0"]);
    // calm nodes by name; their devices busiest first
    expect(groups[2].nodes.map((n) => n.node.node_id)).toEqual(["busy", "quiet"]);
    expect(groups[0].counts).toMatchObject({ down: 1, hot: 1, spinning: 0 });
  });
});

describe("filters and groups", () => {
  const nodes = [
    node("n1", [cell(0), cell(1, { health: "down", util: null })], { node_pool: "train" }),
    node("n2", [cell(0), cell(1)], { node_pool: "train" }),
    node("n3", [cell(0, { health: "down", util: null }), cell(1, { allocated: true, idle: true })],
         { node_pool: "" }),
  ];
  it("keeps only the devices of the chosen kind, and the nodes that have one", () => {
    const groups = overviewGroups(nodes, "node_pool", "down");
    const kept = groups.flatMap((g) => g.nodes.flatMap((n) => n.cells));
    expect(kept).toHaveLength(2);
    expect(kept.every((c) => c.health === "down")).toBe(true);
    expect(groups.flatMap((g) => g.nodes.map((n) => n.node.node_id)).sort()).toEqual(["n1", "n3"]);
    expect(overviewGroups(nodes, "node_pool", "idle").flatMap((g) => g.nodes)).toHaveLength(1);
    expect(focusCounts(nodes)).toMatchObject({ all: 6, down: 2, idle: 1, spinning: 0 });
  });
  it("groups by node pool, names the nodes that report none, and drills into one group", () => {
    const groups = overviewGroups(nodes, "node_pool", "all");
    expect(groups.map((g) => [g.label, g.nodes.length, g.devices])).toEqual([
      ["Node pool: none reported", 1, 2], ["Node pool: train", 2, 4]]);
    const only = overviewGroups(nodes, "node_pool", "all", "train");
    expect(only.map((g) => g.key)).toEqual(["train"]);
    expect(overviewGroups(nodes, "none", "all").map((g) => g.label)).toEqual(["All nodes"]);
  });
  it("lists a node with no device under the all filter only, after the nodes with devices", () => {
    const waiting = { ...node("a-waiting", []), status: "waiting" };
    const empty = node("b-empty", []);
    const all = overviewGroups([waiting, ...nodes, empty], "none", "all");
    expect(all[0].nodes.map((n) => n.node.node_id)).toEqual(["n3", "n1", "n2", "a-waiting",
                                                            "b-empty"]);
    expect(all[0].devices).toBe(6);
    const layout = layoutOverview(all, 600, 400);
    expect(layout.tiles.map((t) => t.node.node.node_id)).toEqual(["n3", "n1", "n2"]);
    expect(overviewGroups([waiting, empty], "none", "down")).toEqual([]);
  });
  it("finds nodes by any part of their hostname or id, in any case", () => {
    const named = [node("gpu-a17", []), node("gpu-b02", []), { ...node("x", []), hostname: "" }];
    expect(findNodes(named, " A1 ").map((n) => n.node_id)).toEqual(["gpu-a17"]);
    expect(findNodes(named, "gpu-")).toHaveLength(2);
    expect(findNodes(named, "")).toBe(named);
    expect(findNodes(named, "x").map((n) => n.node_id)).toEqual(["x"]);
  });
});

describe("the canvas layout", () => {
  const fleet = Array.from({ length: 10000 }, (_, i) =>
    calm(`node-${i}`, { rack: `rack-${Math.floor(i / 16)}` }));
  it("places all 80,000 devices of 10,000 nodes in 625 racks on one screen", () => {
    const groups = overviewGroups(fleet, "rack", "all");
    expect(groups).toHaveLength(625);
    const layout = layoutOverview(groups, 1400, 700);
    expect(layout.cells).toBe(80000);
    expect(layout.tiles).toHaveLength(10000);
    expect(layout.cell).toBeGreaterThanOrEqual(MIN_CELL);
    expect(layout.height).toBeLessThanOrEqual(700);
    expect(layout.headers).toHaveLength(0); // too many groups for a header each
  });
  it("uses big cells and a header per group for a few nodes, and finds what is clicked", () => {
    const groups = overviewGroups(fleet.slice(0, 3), "rack", "all");
    const layout = layoutOverview(groups, 1400, 700);
    expect(layout.cell).toBe(MAX_CELL);
    expect(layout.headers).toHaveLength(1);
    const tile = layout.tiles[1];
    const hit = hitTest(layout, tile.x + 2 * (layout.cell + layout.inner) + 1, tile.y + 1);
    expect(hit).toMatchObject({ kind: "cell", cell: 2 });
    expect(hit?.kind === "cell" && hit.tile.node.node.node_id).toBe(tile.node.node.node_id);
    expect(hitTest(layout, 3, layout.headers[0].y + 3)).toEqual({ kind: "header", group: 0 });
    expect(hitTest(layout, 1399, layout.height - 1)).toBeNull();
  });
  it("drops the headers of 20 racks rather than shrink their cells below readable", () => {
    const groups = overviewGroups(fleet.slice(0, 320), "rack", "all");
    const layout = layoutOverview(groups, 1400, 620);
    expect(groups).toHaveLength(20);
    expect(layout.headers).toHaveLength(0);
    expect(layout.cell).toBeGreaterThanOrEqual(READABLE_CELL);
    expect(layout.cells).toBe(2560);
  });
  it("paints down red in every mode and never reuses a health colour for a value", () => {
    const down = cell(0, { health: "down", util: null });
    expect(canvasFill(down, "util")).toBe(HEALTH_COLORS.down);
    expect(canvasFill(cell(1, { util: null }), "util")).toBe("absent");
    const painted = [0, 0.25, 0.5, 0.75, 1].map((u) => canvasFill(cell(2, { util: u }), "util"));
    for (const colour of Object.values(HEALTH_COLORS)) expect(painted).not.toContain(colour);
  });
});

describe("the overview's components", () => {
  it("reports every device it places and opens the node of a clicked device", () => {
    const groups = overviewGroups(Array.from({ length: 2000 }, (_, i) => calm(`n${i}`)),
                                  "rack", "all");
    const opened: string[] = [];
    render(<DeviceOverview groups={groups} metric="util" onOpenNode={(id) => opened.push(id)}
      onOpenGroup={() => undefined} />);
    const overview = screen.getByTestId("overview");
    expect(overview.dataset.cells).toBe("16000");
    expect(overview.dataset.nodes).toBe("2000");
    const canvas = screen.getByTestId("overview-canvas");
    // jsdom has no layout: the canvas sits at (0, 0); the first header is above the first tile
    const cellPx = Number(overview.dataset.cellPx);
    fireEvent.click(canvas, { clientX: 1, clientY: 18 + 1 });
    expect(opened).toHaveLength(1);
    expect(cellPx).toBeGreaterThanOrEqual(MIN_CELL);
  });
  it("lists only the visible groups of many", () => {
    Object.defineProperty(HTMLElement.prototype, "clientHeight", { configurable: true, value: 300 });
    const groups = overviewGroups(Array.from({ length: 4000 }, (_, i) =>
      calm(`n${i}`, { rack: `r${i}` })), "rack", "all");
    const picked: string[] = [];
    render(<GroupList groups={groups} selected={null} onOpen={(k) => picked.push(k)} height={300} />);
    const rows = screen.getAllByTestId("group-row");
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.length).toBeLessThan(100); // virtualised: not 4000
    fireEvent.click(rows[0]);
    expect(picked).toEqual([rows[0].dataset.key]);
  });
});

describe("the cluster page's devices", () => {
  const columns = (): HeatColumns => {
    const count = 96;
    const ids = Array.from({ length: count }, (_, i) => `node-${i}`);
    const devices = count * 8;
    return {
      generated_at: 1, form: "columns", health: ["ok", "warning", "stale", "down"],
      models: ["NVIDIA H200"], flags: { allocated: 1, idle: 2, spinning: 4 },
      nodes: { node_id: ids, hostname: ids, status: ids.map(() => "ok"),
               devices: ids.map(() => 8), nvlink_domain: ids.map(() => "d"),
               rack: ids.map((_, i) => `rack-${Math.floor(i / 16)}`), zone: ids.map(() => "z"),
               node_pool: ids.map((_, i) => (i % 2 ? "train" : "serve")) },
      devices: {
        index: Array.from({ length: devices }, (_, i) => String(i % 8)),
        model: new Array(devices).fill(0),
        health: Array.from({ length: devices }, (_, i) => (i % 97 === 0 ? 3 : 0)),
        util: Array.from({ length: devices }, (_, i) => (i % 97 === 0 ? null : (i % 10) / 10)),
        mem: new Array(devices).fill(0.5), power: new Array(devices).fill(500),
        temp: new Array(devices).fill(60), flags: new Array(devices).fill(0),
      },
    };
  };
  it("counts every device, filters to the down ones and drills into a group", () => {
    render(<Devices columns={columns()} metric="util" />);
    const count = screen.getByTestId("overview-count");
    expect(count.dataset.shown).toBe("768");
    expect(count.dataset.total).toBe("768");
    const down = Math.ceil(768 / 97);
    expect(screen.getByTestId("focus-down").dataset.count).toBe(String(down));
    fireEvent.click(screen.getByTestId("focus-down"));
    expect(screen.getByTestId("overview-count").dataset.shown).toBe(String(down));
    expect(screen.getByTestId("overview").dataset.cells).toBe(String(down));
    fireEvent.click(screen.getByTestId("focus-all"));
    fireEvent.change(screen.getByTestId("node-search"), { target: { value: "node-1" } });
    // node-1, node-10 ... node-19
    expect(screen.getByTestId("overview-count").dataset.nodes).toBe("11");
    expect(screen.getByTestId("overview-count").dataset.total).toBe("768");
    fireEvent.change(screen.getByTestId("node-search"), { target: { value: "" } });
    fireEvent.click(screen.getByTestId("group-by-node_pool"));
    fireEvent.click(screen.getAllByTestId("group-row")[0]);
    expect(screen.getByTestId("selected-group").textContent).toMatch(/Node pool: (train|serve)/);
    expect(screen.getByTestId("overview-count").dataset.nodes).toBe("48");
    expect(screen.getByTestId("overview").dataset.cells).toBe("384");
  });
  it("lists the nodes that have no device to show, and says why", () => {
    const doc = columns();
    doc.nodes.devices[0] = 0; // node-0 found none; its devices go to node-1
    doc.nodes.devices[1] = 16;
    doc.nodes.status[2] = "waiting";
    doc.nodes.devices[2] = 0;
    doc.nodes.devices[3] = 16;
    render(<Devices columns={doc} metric="util" />);
    fireEvent.click(screen.getByTestId("group-by-none"));
    fireEvent.change(screen.getByTestId("node-search"), { target: { value: "node-0" } });
    expect(screen.getByTestId("overview-count").dataset.nodes).toBe("1");
    expect(screen.getByTestId("overview").dataset.nodes).toBe("0");
    expect(screen.getByTestId("node-row").dataset.node).toBe("node-0");
    expect(screen.getByTestId("no-devices").textContent).toBe("no devices reported");
    fireEvent.change(screen.getByTestId("node-search"), { target: { value: "node-2" } });
    const rows = screen.getAllByTestId("node-row").map((r) => r.dataset.node);
    expect(rows[rows.length - 1]).toBe("node-2"); // after node-20 ... node-29, which have devices
    expect(screen.getByTestId("no-devices").textContent).toBe("waiting for its first summary");
  });
});
