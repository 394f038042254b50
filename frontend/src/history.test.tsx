import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import type { Device, NodeDetail } from "./api";
import { HistoryRange, historyPath, sourceText, type SeriesAnswer } from "./components/HistoryRange";
import { JobHistory } from "./components/JobHistory";
import { Sparkline } from "./components/Sparkline";
import { NodeView } from "./views/Node";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const fromPrometheus: SeriesAnswer = {
  source: "prometheus", error: "", range: "6h", scope: "node", timestamps: [0, 72, 144],
  step_s: 72, interval_s: 5, utilization: [0.1, null, 0.3],
  devices: { "GPU-0": { utilization: [0.2, 0.4, 0.6] } },
};
const fromMemory: SeriesAnswer = {
  source: "memory", error: "Prometheus at http://p:9090 did not answer within 3 s",
  range: "7d", scope: "cluster", timestamps: [1000, 1300, 1600], interval_s: 5,
  utilization: [0.5, 0.5, 0.5],
};

describe("history range and source", () => {
  it("asks for the range and the scope", () => {
    expect(historyPath("6h")).toBe("history?range=6h");
    expect(historyPath("7d", { node_id: "n1" })).toBe("history?range=7d&node_id=n1");
    expect(historyPath("1h", { uuid: "GPU-1", job_id: "" })).toBe("history?range=1h&uuid=GPU-1");
  });
  it("says where the series come from and what they cover", () => {
    expect(sourceText(fromPrometheus)).toBe("From Prometheus: the last 6 h, a point every 72 s");
    expect(sourceText(fromMemory)).toBe("In-memory history of the head: the last 10 min only");
  });
  it("shows the source, the error and switches the range", () => {
    const chosen: string[] = [];
    render(<HistoryRange value="7d" onChange={(r) => chosen.push(r)} answer={fromMemory} />);
    expect(screen.getByTestId("history-source").dataset.source).toBe("memory");
    expect(screen.getByTestId("history-error").textContent).toContain("did not answer within 3 s");
    expect(screen.getByTestId("range-7d").getAttribute("aria-pressed")).toBe("true");
    fireEvent.click(screen.getByTestId("range-24h"));
    expect(chosen).toEqual(["24h"]);
    expect(screen.queryByTestId("history-warnings")).toBeNull();
  });
  it("shows what Prometheus warned of beside its series", () => {
    render(<HistoryRange value="6h" onChange={() => undefined}
      answer={{ ...fromPrometheus, warnings: ["partial response"] }} />);
    expect(screen.getByTestId("history-warnings").textContent).toContain("partial response");
    expect(screen.queryByTestId("history-error")).toBeNull();
  });
});

describe("the node page's history", () => {
  const device = {
    uuid: "GPU-0", index: "0", vendor: "nvidia", model: "NVIDIA H200", pci_bus_id: "", up: true,
    health: "ok", utilization: 0.9, memory_used_bytes: 0, memory_total_bytes: 1, power_watts: 1,
    power_limit_watts: 2, temperature_celsius: 60, throttle_reasons: [],
    pcie: { generation: 5, generation_max: 5, width: 16, width_max: 16 }, links: [],
    processes: [], holders: [], findings: [], nvlink_transmit_bytes_per_s: null,
    nvlink_receive_bytes_per_s: null, pcie_transmit_bytes_per_s: null,
    pcie_receive_bytes_per_s: null, nvlink_domain: "", fabric: null,
  } as Device;
  const detail = {
    node_id: "n1", hostname: "h1", node_ip: "10.0.0.1", url: "http://h1:9478", status: "ok",
    error: "", snapshot_age_s: 0, placement: {}, devices: [device], topology: { matrix: [] },
    findings: [], backends: [],
    history: { timestamps: [1], utilization: [0.5], devices: { "GPU-0": { utilization: [0.5] } } },
  } as NodeDetail;

  it("draws the devices' series of the chosen range from the history endpoint", async () => {
    const asked: string[] = [];
    vi.stubGlobal("fetch", vi.fn(async (url: string) => {
      asked.push(url);
      const range = url.includes("24h") ? "24h" : "1h";
      const body = url.startsWith("api/history") ? { ...fromPrometheus, range } : detail;
      return new Response(JSON.stringify(body));
    }));
    render(<NodeView nodeId="n1" refreshMs={60000} ray={null} />);
    await waitFor(() => screen.getByTestId("history-source"));
    expect(screen.getByTestId("history-source").dataset.source).toBe("prometheus");
    expect(screen.getByTestId("device-0").querySelector("[data-testid=sparkline]")
      ?.getAttribute("data-points")).toBe("3");
    fireEvent.click(screen.getByTestId("range-24h"));
    await waitFor(() => expect(screen.getByTestId("history-source").textContent).toContain("24 h"));
    expect(asked).toContain("api/history?range=1h&node_id=n1");
    expect(asked).toContain("api/history?range=24h&node_id=n1");
  });
});

describe("a job's history", () => {
  function serve(answer: SeriesAnswer) {
    vi.stubGlobal("fetch", vi.fn(async () => new Response(JSON.stringify(answer))));
  }
  it("draws what the job held and used, from Prometheus", async () => {
    serve({ source: "prometheus", error: "", range: "1h", scope: "job", timestamps: [0, 12],
            step_s: 12, interval_s: 5, devices_held: [1, 2], utilization: [0.5, 0.25],
            memory_used_bytes: [null, 2 ** 30], idle_allocations: [0, 1] });
    render(<JobHistory jobId="02000000" refreshMs={60000} />);
    await waitFor(() => screen.getByTestId("history-source"));
    const box = screen.getByTestId("job-history");
    expect(box.textContent).toContain("Devices held: 2");
    expect(box.textContent).toContain("Their utilization: 25%");
    expect(box.textContent).toContain("Its memory: 1.0 GiB");
    expect([...box.querySelectorAll("[data-testid=sparkline]")].map((s) => s.getAttribute("data-points")))
      .toEqual(["2", "2", "1", "2"]);
  });
  it("says that without Prometheus there is none, and why", async () => {
    serve({ source: "memory", error: "Prometheus at http://p:9090: ClientConnectorError",
            range: "1h", scope: "job", timestamps: [], interval_s: 5, devices_held: [] });
    render(<JobHistory jobId="02000000" refreshMs={60000} />);
    await waitFor(() => screen.getByTestId("history-source"));
    expect(screen.getByTestId("history-source").textContent).toContain("No per-job history");
    expect(screen.getByTestId("history-error").textContent).toContain("ClientConnectorError");
    expect(screen.queryAllByTestId("sparkline")).toHaveLength(0);
  });
});

describe("a sparkline over a long range", () => {
  it("shows a value without neighbours as a dot, and a run as a line", () => {
    render(<Sparkline values={[null, null, 0.5, null, 0.2, 0.3]} max={1} />);
    const dots = screen.getAllByTestId("sparkline-dot");
    expect(dots).toHaveLength(1);
    expect(dots[0].getAttribute("cx")).toBe("48");
    expect(screen.getByTestId("sparkline").querySelector("path")?.getAttribute("d"))
      .toBe("M48.0,14.0M96.0,21.8L120.0,19.2");  // y = 28 - v * 26 - 1
  });
});
