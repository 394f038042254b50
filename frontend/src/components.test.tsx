import { describe, expect, it } from "vitest";
import { render, screen } from "@testing-library/react";
import type { Device, Fabric, Finding, HeatNode } from "./api";
import { rayLink } from "./api";
import { parseRoute } from "./App";
import { FabricTable, fabricDevices } from "./components/FabricTable";
import { Heatmap, cellColor, groupRows } from "./components/Heatmap";
import { Sparkline } from "./components/Sparkline";
import { ABSENT_FILL, bytes, heatColor, percent, rate, watts } from "./format";
import { overviewGroups } from "./overview";
import { FindingRow, filterFindings } from "./views/Findings";

function node(id: string, domain: string, cells = 8, idleAt = -1): HeatNode {
  return {
    node_id: id, hostname: `host-${id}`, status: "ok", nvlink_domain: domain,
    devices: Array.from({ length: cells }, (_, i) => ({
      uuid: `${id}-${i}`, index: String(i), model: "NVIDIA H200", health: i === 1 ? "down" : "ok",
      util: i / 10, mem: 0.5, power: 500, temp: 60, allocated: i === idleAt, idle: i === idleAt,
    })),
  };
}

describe("format", () => {
  it("shows base units readably and absent values as a dash", () => {
    expect(percent(0.853)).toBe("85%");
    expect(percent(null)).toBe("–");
    expect(bytes(150754820096)).toBe("140 GiB");
    expect(rate(12117663468)).toBe("12.1 GB/s");
    expect(watts(658)).toBe("658 W");
    expect(watts(3675443)).toBe("3675.4 kW");
    expect(heatColor(null)).toBe(ABSENT_FILL);
  });
});

describe("routes and links", () => {
  it("parses hash routes", () => {
    expect(parseRoute("#/node/abc")).toEqual({ view: "node", nodeId: "abc" });
    expect(parseRoute("#/workloads/02000000")).toEqual({ view: "workloads", jobId: "02000000" });
    expect(parseRoute("#/findings")).toEqual({ view: "findings" });
    expect(parseRoute("")).toEqual({ view: "cluster" });
  });
  it("decodes a route's ids once", () => {
    expect(parseRoute("#/node/%3Cimg%3E")).toEqual({ view: "node", nodeId: "<img>" });
    expect(parseRoute("#/workloads/a%20b")).toEqual({ view: "workloads", jobId: "a b" });
    expect(parseRoute("#/transfers/node/%3Cx")).toEqual(
      { view: "transfers", job: null, node: "<x" });
    expect(parseRoute("#/node/%E0%A4%A")).toEqual({ view: "node", nodeId: "%E0%A4%A" });
  });
  it("links into Ray's own dashboard", () => {
    expect(rayLink("/", "actors/ab")).toBe("/#/actors/ab");
    expect(rayLink("http://h:8265", "cluster/nodes/n")).toBe("http://h:8265/#/cluster/nodes/n");
    expect(rayLink(null, "x")).toBeNull();
  });
});

describe("heatmap", () => {
  it("lists each group's nodes under its header", () => {
    const groups = overviewGroups([node("b", "d2"), node("a", "d1"), node("c", "d2")],
                                  "nvlink_domain", "all");
    const rows = groupRows(groups);
    expect(rows.map((r) => (r.kind === "group" ? `[${r.label}:${r.count}]` : r.node.node_id)))
      .toEqual(["[NVLink domain: d2:2]", "b", "c", "[NVLink domain: d1:1]", "a"]);
  });
  it("colours a down device red whatever the metric", () => {
    const cell = node("a", "d").devices[1];
    expect(cellColor(cell, "util")).toBe("#e53935");
  });
  it("renders only the visible rows of 1000 nodes and flags idle allocations", () => {
    // jsdom has no layout: give the scroll container a size
    Object.defineProperty(HTMLElement.prototype, "clientHeight", { configurable: true, value: 400 });
    Object.defineProperty(HTMLElement.prototype, "clientWidth", { configurable: true, value: 1000 });
    const nodes = Array.from({ length: 1000 }, (_, i) => node(`n${i}`, "d", 8, i === 0 ? 2 : -1));
    render(<Heatmap groups={overviewGroups(nodes, "nvlink_domain", "all")} metric="util"
      onOpen={() => undefined} height={400} />);
    const cells = screen.getAllByRole("button");
    expect(cells.length).toBeGreaterThan(0);
    expect(cells.length).toBeLessThan(400); // virtualised: not 8000
    expect(screen.getByTestId("cell-n0-2").dataset.idle).toBe("true");
    expect(screen.getByTestId("cell-n0-1").dataset.health).toBe("down");
  });
});

describe("findings", () => {
  const findings: Finding[] = [
    { kind: "device_down", severity: "critical", node_id: "n1", hostname: "h1",
      message: "GPU 1 is not answering", device_uuid: "u", device_index: "1" },
    { kind: "idle_allocation", severity: "warning", node_id: "n1", hostname: "h1",
      message: "IdleHolder holds 1 of GPU 2", device_uuid: "v", device_index: "2" },
  ];
  it("filters by kind and severity", () => {
    expect(filterFindings(findings, "idle_allocation", "")).toHaveLength(1);
    expect(filterFindings(findings, "", "critical")[0].kind).toBe("device_down");
    expect(filterFindings(findings, "", "")).toHaveLength(2);
  });
  it("shows a finding's message and a link to its node", () => {
    render(<FindingRow finding={findings[1]} />);
    expect(screen.getByText("IdleHolder holds 1 of GPU 2")).toBeTruthy();
    expect(screen.getByText("h1").getAttribute("href")).toBe("#/node/n1");
  });
});

describe("sparkline", () => {
  it("draws the points it has", () => {
    render(<Sparkline values={[0.1, null, 0.5, 0.9]} max={1} />);
    expect(screen.getByTestId("sparkline").dataset.points).toBe("3");
  });
});

describe("NVLink fabric", () => {
  const fabric = (over: Partial<Fabric>): Fabric => ({
    state: 3, status: 0, health_summary: 1, issues: [], state_name: "completed",
    status_name: "success", health_summary_name: "healthy", incorrect_configuration: "none",
    cluster_uuid: "5d3c2b1a-0f9e-4d8c-b7a6-958473625140", clique_id: "7", ...over,
  });
  const device = (index: string, f: Fabric | null, findings: Finding[] = []) =>
    ({ uuid: `u${index}`, index, fabric: f, findings } as unknown as Device);
  const degraded: Finding = {
    kind: "fabric_unhealthy", severity: "critical", node_id: "n1", hostname: "h1",
    message: "GPU 1: NVLink fabric unhealthy: degraded_bandwidth", device_uuid: "u1",
    device_index: "1" };
  const devices = [
    device("0", fabric({})),
    device("1", fabric({ health_summary: 2, health_summary_name: "unhealthy",
                         issues: ["degraded_bandwidth"] }), [degraded]),
    device("2", null),
  ];
  it("lists only GPUs with a fabric", () => {
    expect(fabricDevices(devices).map((d) => d.index)).toEqual(["0", "1"]);
    const { container } = render(<FabricTable devices={devices} />);
    expect(container.querySelector('[data-testid="fabric-2"]')).toBeNull();
    expect(container.querySelectorAll('[data-testid^="fabric-"]')).toHaveLength(2);
  });
  it("highlights the GPU with a fabric finding and names its issues", () => {
    const { container } = render(<FabricTable devices={devices} />);
    const row = (i: string) => container.querySelector(`[data-testid="fabric-${i}"]`)!;
    expect(row("0").getAttribute("data-unhealthy")).toBe("false");
    const sick = row("1");
    expect(sick.getAttribute("data-unhealthy")).toBe("true");
    expect(sick.textContent).toContain("unhealthy");
    expect(sick.textContent).toContain("degraded_bandwidth");
  });
  it("shows nothing on a node without fabric", () => {
    const { container } = render(<FabricTable devices={[device("0", null)]} />);
    expect(container.textContent).toBe("");
  });
});
