import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen, waitFor } from "@testing-library/react";
import type { Device, HeatCell, HeatNode, NodeDetail, Unit } from "./api";
import {
  ActivityCell, HolderStateChip, activityText, holderState, withTensor,
} from "./components/Activity";
import { cellColor, cellTitle } from "./components/Heatmap";
import { HeatLegend, scaleGradient } from "./components/Legend";
import { InfoMark } from "./components/InfoMark";
import { HEALTH_COLORS, MEMORY_AS_RAY_SHOWS_IT, SCALE_STOPS, heatColor, heatTextColor } from "./format";
import { NodeView } from "./views/Node";
import { JobPanel, carriesActivity } from "./views/Workloads";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

function luminance(hex: string): number {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

describe("the sequential scale", () => {
  const ratios = Array.from({ length: 21 }, (_, i) => i / 20);
  it("runs from its first stop to its last", () => {
    expect(heatColor(0)).toBe(SCALE_STOPS[0]);
    expect(heatColor(1)).toBe(SCALE_STOPS[SCALE_STOPS.length - 1]);
    expect(heatColor(2)).toBe(heatColor(1));
    expect(heatColor(-1)).toBe(heatColor(0));
  });
  it("gets darker at every step, so order reads without hue (colour-blind, greyscale)", () => {
    const lights = ratios.map((r) => luminance(heatColor(r)));
    for (let i = 1; i < lights.length; i += 1) expect(lights[i]).toBeLessThan(lights[i - 1]);
  });
  it("never paints a value in a health colour, nor anything red", () => {
    const health = new Set(Object.values(HEALTH_COLORS));
    for (const r of ratios) {
      const colour = heatColor(r);
      expect(health.has(colour)).toBe(false);
      const [red, , blue] = [1, 3, 5].map((i) => parseInt(colour.slice(i, i + 2), 16));
      expect(blue).toBeGreaterThan(red); // blues only
    }
  });
  it("keeps the cell's label legible", () => {
    for (const r of ratios) {
      const contrast = Math.abs(luminance(heatColor(r)) - luminance(heatTextColor(r)));
      expect(contrast).toBeGreaterThan(0.35);
    }
  });
});

const cell = (over: Partial<HeatCell>): HeatCell => ({
  uuid: "u", index: "3", model: "NVIDIA H200", health: "ok", util: 0.97, mem: 0.5, power: 690,
  temp: 70, allocated: true, idle: false, ...over,
});
const heatNode: HeatNode = { node_id: "n", hostname: "h", status: "ok", nvlink_domain: "", devices: [] };

describe("heatmap cells", () => {
  it("paints a busy device far from the red that means down", () => {
    expect(cellColor(cell({}), "util")).not.toBe(HEALTH_COLORS.down);
    expect(cellColor(cell({}), "util")).toBe(heatColor(0.97));
    expect(cellColor(cell({ health: "down" }), "util")).toBe(HEALTH_COLORS.down);
  });
  it("names the activity and the spinning state in the tooltip", () => {
    const title = cellTitle(cell({ act: { graphics: 1, sm: 0.02 }, spinning: true }), heatNode);
    expect(title).toContain("activity: GR 100% · SM 2%");
    expect(title).toContain("SPINNING");
    expect(cellTitle(cell({}), heatNode)).not.toContain("activity");
  });
});

describe("the legend", () => {
  it("shows the scale in the utilization mode", () => {
    const { container } = render(<HeatLegend metric="util" />);
    expect(scaleGradient()).toBe(`linear-gradient(to right, ${SCALE_STOPS.join(", ")})`);
    expect(screen.getByTestId("legend-scale")).toBeTruthy();
    expect(container.textContent).toContain("utilization 0%");
    expect(container.textContent).toContain("100%");
    expect(screen.getByTestId("legend-down").textContent).toBe("down");
    expect(container.querySelector('[data-testid="legend-ok"]')).toBeNull();
  });
  it("shows the health colours in the health mode", () => {
    render(<HeatLegend metric="health" />);
    for (const health of Object.keys(HEALTH_COLORS)) {
      expect(screen.getByTestId(`legend-${health}`).textContent).toBe(health);
    }
    expect(screen.queryByTestId("legend-scale")).toBeNull();
  });
});

describe("activity and holder state", () => {
  it("lists measured engines in a fixed order, the tensor pipe folded in", () => {
    const activity = withTensor({ dram: 0.3, sm: 0.7, graphics: 0.85 }, { tensor: 0.4, fp16: 0.1 });
    expect(activityText(activity)).toBe("GR 85% · SM 70% · Tensor 40% · DRAM 30%");
    expect(activityText({})).toBe("");
    expect(activityText(undefined)).toBe("");
  });
  it("shows a dash, not zero, where nothing is measured", () => {
    render(<ActivityCell activity={{}} />);
    expect(screen.getByTestId("activity").dataset.measured).toBe("false");
    expect(screen.getByTestId("activity").textContent).toBe("–");
  });
  it("tells spinning from busy and idle", () => {
    expect(holderState({ idle: false, spinning: true })).toBe("spinning");
    expect(holderState({ idle: true, spinning: false })).toBe("idle");
    expect(holderState({ idle: false })).toBe("busy");
    render(<HolderStateChip holder={{ idle: false, spinning: true }} />);
    expect(screen.getByTestId("state").dataset.state).toBe("spinning");
    expect(screen.getByTestId("state").textContent).toBe("SPINNING");
  });
});

function device(index: number, over: Partial<Device> = {}): Device {
  return {
    uuid: `GPU-${index}`, index: String(index), vendor: "nvidia", model: "NVIDIA H200",
    pci_bus_id: "", up: true, health: "ok", utilization: 0.9, memory_used_bytes: 0,
    memory_total_bytes: 150754820096, memory_reserved_bytes: 633339904, power_watts: 600,
    power_limit_watts: 700, temperature_celsius: 60, throttle_reasons: [],
    activity: { graphics: 0.9, sm: 0.8 }, pipe_activity: { tensor: 0.5 },
    pcie: { generation: 5, generation_max: 5, width: 16, width_max: 16 },
    links: Array.from({ length: 18 }, (_, i) => ({
      link_type: "nvlink", index: i, up: true, transmit_bytes_per_s: 1e9, receive_bytes_per_s: 1e9,
      version: "4", remote_type: "switch", peer_uuid: "", errors: 0 })).concat([{
      link_type: "pcie", index: 0, up: true, transmit_bytes_per_s: 1e8, receive_bytes_per_s: 1e8,
      version: "5", remote_type: "host", peer_uuid: "", errors: 0 }]),
    processes: [], holders: [], findings: [], nvlink_transmit_bytes_per_s: null,
    nvlink_receive_bytes_per_s: null, pcie_transmit_bytes_per_s: null,
    pcie_receive_bytes_per_s: null, nvlink_domain: "", fabric: null, ...over,
  };
}

const holder = (pid: number, over: Record<string, unknown>) => ({
  pid, ray_job_id: "01000000", ray_worker_id: "", ray_actor_id: "", actor_class: `A${pid}`,
  actor_name: "", ray_task_id: "", task_name: "", fraction: 1, idle: false, spinning: false,
  shared: false, idle_rule: "activity", ...over,
});

describe("the node page", () => {
  const devices = Array.from({ length: 8 }, (_, i) => device(i));
  devices[1] = device(1, { spinning: 1, activity: { graphics: 1, sm: 0.02 }, pipe_activity: {},
                           collective_suspected_stall: true,
                           holders: [holder(11, { spinning: true, actor_class: "Spinner" })] });
  devices[2] = device(2, { activity: {}, pipe_activity: {},
                           holders: [holder(12, { idle: true, idle_rule: "no_context" })] });
  devices[3] = device(3, { holders: [holder(13, { fraction: 0.5, shared: true })] });
  const detail = {
    node_id: "n1", hostname: "h1", node_ip: "10.0.0.1", url: "http://h1:9478", status: "ok",
    error: "", snapshot_age_s: 0, placement: {}, devices, topology: { matrix: [] },
    findings: [], backends: [], history: { timestamps: [], utilization: [], devices: {} },
  } as NodeDetail;

  async function open() {
    vi.stubGlobal("fetch", vi.fn(async () => new Response(JSON.stringify(detail))));
    render(<NodeView nodeId="n1" refreshMs={60000} ray={null} />);
    await waitFor(() => screen.getByTestId("links"));
  }

  it("lists every link of the node, not a scroll box of a few", async () => {
    await open();
    const table = screen.getByTestId("links");
    expect(table.querySelectorAll("tbody tr")).toHaveLength(152);
    for (let box = table.parentElement; box; box = box.parentElement) {
      expect(box.style.maxHeight).toBe("");
      expect(getComputedStyle(box).overflowY === "auto" || getComputedStyle(box).overflowY === "scroll")
        .toBe(false);
    }
  });
  it("shows each device's activity and each holder's state", async () => {
    await open();
    const cells = screen.getAllByTestId("activity");
    expect(cells).toHaveLength(8);
    expect(cells[0].textContent).toBe("GR 90% · SM 80% · Tensor 50%");
    expect(cells[2].dataset.measured).toBe("false");
    const holders = screen.getAllByTestId("holder");
    expect(holders.map((h) => h.querySelector('[data-testid="state"]')!.getAttribute("data-state")))
      .toEqual(["spinning", "idle", "busy"]);
    // a whole-device holder carries the device's activity; a fractional one is shared
    expect(holders[0].querySelector('[data-testid="holder-activity"]')!.textContent).toBe("GR 100% · SM 2%");
    expect(holders[2].textContent).toContain("shared");
    expect(holders[2].querySelector('[data-testid="holder-activity"]')).toBeNull();
    const device1 = screen.getByTestId("device-1");
    expect(device1.querySelector('[data-state="spinning"]')).not.toBeNull();
    expect(screen.getByTestId("device-0").querySelector('[data-state="spinning"]')).toBeNull();
    expect(screen.getAllByTestId("collective-stall")).toHaveLength(1);
    expect(device1.querySelector('[data-testid="collective-stall"]')).not.toBeNull();
  });
});

describe("the workloads page", () => {
  const use = (over: Record<string, unknown>) => ({
    node_id: "n1", hostname: "h1", uuid: "GPU-2", index: "2", model: "NVIDIA H200",
    fraction: 1, allocated: true, idle: false, utilization: 1, process_memory_bytes: 2 ** 34,
    process_sm_utilization: 1, ...over,
  });
  const unit = (devices: Record<string, unknown>[]) => ({
    key: "actor:a", kind: "actor", job_id: "01000000", actor_id: "a", actor_class: "Spinner",
    actor_name: "", task_id: "", task_name: "", pid: 7, node_id: "n1", hostname: "h1",
    devices, gpus: 1, idle: false,
  });
  const job = (units: unknown[]) => ({
    job_id: "01000000", actors: 1, tasks: 0, workers: 0, gpus: 1, devices: 1,
    idle_allocations: 0, nodes: 1, units,
  });

  async function open(body: unknown) {
    vi.stubGlobal("fetch", vi.fn(async () => new Response(JSON.stringify(body))));
    render(<JobPanel jobId="01000000" refreshMs={60000} ray={null} />);
    await waitFor(() => screen.getByTestId("job-units"));
  }

  it("shows a spinning holder's own state and its activity where the API carries them", async () => {
    await open(job([unit([use({ spinning: true, shared: false,
                                activity: { graphics: 1, sm: 0.02 } })])]));
    const row = screen.getByTestId("unit-device");
    expect(row.dataset.spinning).toBe("true");
    expect(row.querySelector('[data-testid="state"]')!.getAttribute("data-state")).toBe("spinning");
    expect(row.querySelector('[data-testid="activity"]')!.textContent).toBe("GR 100% · SM 2%");
  });
  it("renders only the rows in view of a job on 10,000 nodes, the first unit named", async () => {
    Object.defineProperty(HTMLElement.prototype, "clientHeight", { configurable: true, value: 640 });
    const devices = Array.from({ length: 80000 }, (_, i) =>
      use({ node_id: `n${Math.floor(i / 8)}`, uuid: `GPU-${i}`, index: String(i % 8) }));
    await open(job([unit(devices)]));
    expect(screen.getByTestId("job-units").dataset.rows).toBe("80000");
    const rows = screen.getAllByTestId("unit-device");
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.length).toBeLessThan(200);
    expect(screen.getAllByTestId("unit")).toHaveLength(1);
    expect(screen.getByTestId("unit").textContent).toContain("Spinner");
  });
  it("has no activity column where the API does not carry it (no false 'not measured')", async () => {
    await open(job([unit([use({})])]));
    expect(carriesActivity([unit([use({})])] as unknown as Unit[])).toBe(false);
    expect(screen.getByTestId("job-units").textContent).not.toContain("Activity");
    expect(screen.queryByTestId("activity")).toBeNull();
  });
});

describe("memory as Ray shows it", () => {
  it("explains Ray's reserved memory next to the cluster's memory", async () => {
    render(<InfoMark help={MEMORY_AS_RAY_SHOWS_IT} testid="help" />);
    const help = screen.getByTestId("help").getAttribute("aria-label")!;
    expect(help).toContain("604 MiB in Ray and 0 B here");
    expect(help).toContain("ray.accelerator.memory.reserved");
  });
});
