import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen, waitFor, within } from "@testing-library/react";
import type { Finding, TransferEnd, Transfers } from "./api";
import { parseRoute } from "./App";
import { duration } from "./format";
import { FindingRow } from "./views/Findings";
import { TransfersView, transfersHref, transfersPath } from "./views/Transfers";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const HEAD = "a".repeat(56);
const WORKER = "b".repeat(56);

function end(over: Partial<TransferEnd>): TransferEnd {
  return { task_id: "t", actor_id: "p".repeat(32), actor_class: "Producer", state: "RUNNING",
           node_id: HEAD, hostname: "head-host", devices: [], ...over };
}

const stall: Finding = {
  kind: "collective_stall", severity: "critical", node_id: WORKER, hostname: "worker-host",
  message: "NVIDIA H200 #5: suspected hung collective", device_uuid: "GPU-5", device_index: "5",
};

const body: Transfers = {
  generated_at: 1, pairing_nodes: [{ node_id: HEAD, hostname: "head-host" }],
  in_flight: 2, stalled: 1, oldest_age_s: 23.4, dropped: 0,
  by_job: [{ job_id: "01000000", in_flight: 2, stalled: 1, oldest_age_s: 23.4, aborts: 1 }],
  transfers: [
    { job_id: "01000000", since: 0, age_s: 23.4, stalled: true, consumer_task_id: "c",
      reported_by: HEAD,
      source: end({ task_id: "s1", devices: [{ uuid: "GPU-0", index: "0", model: "H200",
                                               node_id: HEAD, hostname: "head-host" }] }),
      destination: end({ task_id: "r1", actor_id: "c".repeat(32), actor_class: "Consumer",
                         state: "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", node_id: WORKER,
                         hostname: "worker-host",
                         devices: [{ uuid: "GPU-3", index: "3", model: "H200",
                                     node_id: WORKER, hostname: "worker-host" }] }) },
    { job_id: "01000000", since: 20, age_s: 2.2, stalled: false, slow: true,
      consumer_task_id: "c2", reported_by: HEAD, source: end({ task_id: "s2" }),
      destination: end({ task_id: "r2", node_id: "", hostname: "" }) },
  ],
  aborts: [{ job_id: "01000000", age_s: 25, at: 0, ago_s: 300, source: end({}),
             destination: end({ actor_class: "Consumer" }) }],
  collective_stalls: [stall],
};

async function open(filter = { job: null as string | null, node: null as string | null }) {
  const fetched = vi.fn(async (_url: string) => new Response(JSON.stringify(body)));
  vi.stubGlobal("fetch", fetched);
  render(<TransfersView filter={filter} refreshMs={60000} ray="/" />);
  await waitFor(() => screen.getByTestId("transfers-list"));
  return fetched;
}

describe("the transfers view", () => {
  it("is reached by its routes", () => {
    expect(parseRoute("#/transfers")).toEqual({ view: "transfers", job: null, node: null });
    expect(parseRoute("#/transfers/job/01000000"))
      .toEqual({ view: "transfers", job: "01000000", node: null });
    expect(parseRoute(`#/transfers/node/${HEAD}`))
      .toEqual({ view: "transfers", job: null, node: HEAD });
    expect(transfersHref({ node: HEAD })).toBe(`#/transfers/node/${HEAD}`);
    expect(transfersPath({ job: "01000000", node: null })).toBe("transfers?job_id=01000000");
  });
  it("reads ages as a person does", () => {
    expect(duration(23.4)).toBe("23 s");
    expect(duration(185)).toBe("3 min 5 s");
    expect(duration(7800)).toBe("2 h 10 min");
    expect(duration(null)).toBe("–");
  });
  it("shows the counts, the job and each transfer with both ends", async () => {
    await open();
    expect(screen.getByTestId("transfers-in-flight").textContent).toBe("2");
    expect(screen.getByTestId("transfers-stalled").textContent).toBe("1");
    expect(screen.getByTestId("transfers-oldest").textContent).toBe("23 s");
    expect(screen.getByTestId("transfers-pairing").textContent).toContain("head-host");
    const job = screen.getByTestId("transfers-job-01000000");
    expect(within(job).getByTestId("job-in-flight").textContent).toBe("2");
    expect(within(job).getByTestId("job-stalled").textContent).toBe("1");
    expect(within(job).getByTestId("transfer-job").getAttribute("href")).toBe("#/workloads/01000000");
    const rows = screen.getAllByTestId("transfer");
    expect(rows.map((r) => r.dataset.stalled)).toEqual(["true", "false"]);
    const stalled = rows[0];
    expect(within(stalled).getByTestId("transfer-state").textContent).toBe("STALLED");
    expect(within(stalled).getByTestId("transfer-age").textContent).toBe("23 s");
    const source = within(stalled).getByTestId("transfer-source");
    const destination = within(stalled).getByTestId("transfer-destination");
    expect(source.textContent).toContain("Producer pppppppp");
    expect(destination.textContent).toContain("Consumer cccccccc");
    expect(destination.textContent).toContain("pending");
    expect(within(source).getByTestId("end-device").getAttribute("href")).toBe(`#/node/${HEAD}`);
    expect(within(destination).getByTestId("end-device").textContent).toBe("device 3 on worker-host");
    expect(within(destination).getByTestId("end-device").getAttribute("href"))
      .toBe(`#/node/${WORKER}`);
    expect(within(source).getByRole("link", { name: /Producer/ }).getAttribute("href"))
      .toBe(`/#/actors/${"p".repeat(32)}`);
    // past the agent's report threshold, not stalled yet
    expect(within(rows[1]).getByTestId("transfer-state").textContent).toBe("slow");
    // an end with no device and no node says so
    expect(within(rows[1]).getByTestId("transfer-destination").textContent)
      .toContain("no device · node unknown");
    expect(screen.getAllByTestId("transfer-abort")).toHaveLength(1);
    expect(screen.getByTestId("transfer-abort").textContent).toContain("5 min 0 s ago");
    expect(screen.getByTestId("finding").dataset.kind).toBe("collective_stall");
  });
  it("asks for one job's transfers and says so", async () => {
    const fetched = await open({ job: "01000000", node: null });
    expect(fetched.mock.calls[0][0]).toBe("api/transfers?job_id=01000000");
    expect(screen.getByTestId("transfers-scope").textContent).toContain("all transfers");
  });
  it("links transfer findings to the view", () => {
    render(<FindingRow finding={{ ...stall, kind: "transfer_stalled" }} />);
    expect(screen.getByTestId("finding-transfers-link").getAttribute("href")).toBe("#/transfers");
    cleanup();
    render(<FindingRow finding={{ ...stall, kind: "transfer_slow", severity: "info" }} />);
    expect(screen.getByTestId("finding-transfers-link").getAttribute("href")).toBe("#/transfers");
  });
});
