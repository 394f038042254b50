import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen, waitFor } from "@testing-library/react";
import { recordingPath, type NodeDetail } from "./api";
import { NodeView } from "./views/Node";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const NODE = "ab".repeat(28);

describe("the node page's recording download", () => {
  it("asks the head for the node's last 10 minutes", () => {
    expect(recordingPath(NODE)).toBe(`api/nodes/${NODE}/record?last=10m`);
    expect(recordingPath("a/b", "90s")).toBe("api/nodes/a%2Fb/record?last=90s");
  });
  it("is offered on the node page as a download of that node", async () => {
    const detail = {
      node_id: NODE, hostname: "h1", node_ip: "10.0.0.1", url: "http://h1:9478", status: "ok",
      error: "", snapshot_age_s: 0, placement: {}, devices: [], topology: { matrix: [] },
      findings: [], backends: [], history: { timestamps: [], utilization: [], devices: {} },
    } as unknown as NodeDetail;
    vi.stubGlobal("fetch", vi.fn(async () => new Response(JSON.stringify(detail))));
    render(<NodeView nodeId={NODE} refreshMs={60000} ray={null} />);
    const link = await waitFor(() => screen.getByTestId("node-recording-link"));
    expect(link.textContent).toBe("Download recording (last 10 min)");
    expect(link.getAttribute("href")).toBe(`api/nodes/${NODE}/record?last=10m`);
    expect(link.hasAttribute("download")).toBe(true);
  });
});
