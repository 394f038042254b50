// Browser test of the Accelerators tab at cluster scale, driven by pytest
// (tests/test_dashboard_scale.py): the standalone dashboard over a synthetic fleet.
// The cluster page renders, its overview places every device (what the page reports,
// not pixels), filtering to "down" keeps exactly the down ones, a group drills down to
// its nodes, and a click on a device of the overview opens its node's page.
// Environment: BASE_URL, SHOTS (folder), EXPECT_NODES, EXPECT_DEVICES, EXPECT_DOWN.
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, checks, failed, openBrowser } from "./harness.mjs";

const base = process.env.BASE_URL;
const shots = process.env.SHOTS ?? mkdtempSync(join(tmpdir(), "shots-"));
const nodes = process.env.EXPECT_NODES;
const devices = process.env.EXPECT_DEVICES;
const down = process.env.EXPECT_DOWN;
mkdirSync(shots, { recursive: true });
const timings = {};

async function timed(name, work) {
  const started = Date.now();
  const result = await work();
  timings[name] = Date.now() - started;
  return result;
}

const { context, page } = await openBrowser();
const count = page.getByTestId("overview-count");
const overview = page.getByTestId("overview");
try {
  await timed("first_render_ms", async () => {
    await page.goto(`${base}/accelerators/#/`);
    await page.locator(`[data-testid="overview-count"][data-total="${devices}"]`)
      .waitFor({ timeout: 120000 });
  });
  check((await count.getAttribute("data-shown")) === devices, `all ${devices} devices shown`);
  check((await count.getAttribute("data-nodes")) === nodes, `on all ${nodes} nodes`);
  check((await overview.getAttribute("data-cells")) === devices,
        `the overview places ${devices} cells (${await overview.getAttribute("data-cells")})`);
  check((await overview.getAttribute("data-nodes")) === nodes, "one strip per node");
  await page.getByTestId("device-count").filter({ hasText: devices }).waitFor({ timeout: 60000 });
  const canvas = page.getByTestId("overview-canvas");
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  check(box !== null && box.height > 0 && box.height <= 900,
        `every device on one screen (${box && box.height} px tall)`);
  const rows = await page.getByTestId("node-row").count();
  check(rows > 0 && rows < 200, `the node list renders only visible rows (${rows})`);
  const [fx, fy] = (await overview.getAttribute("data-first-cell")).split(",").map(Number);
  await page.mouse.move(box.x + fx, box.y + fy);
  await page.getByTestId("overview-tip").waitFor();
  check((await page.getByTestId("overview-tip").innerText()).includes("device"),
        "hovering a cell names the device");
  timings.cell_px = Number(await overview.getAttribute("data-cell-px"));
  timings.overview_height_px = box.height;
  await page.mouse.move(0, 0);
  await page.screenshot({ path: join(shots, "cluster-scale.png"), fullPage: true });

  // Filter: only the down devices, all of them.
  await timed("filter_down_ms", async () => {
    await page.getByTestId("focus-down").click();
    await page.locator(`[data-testid="overview-count"][data-shown="${down}"]`)
      .waitFor({ timeout: 30000 });
  });
  check((await page.getByTestId("focus-down").getAttribute("data-count")) === down,
        `${down} down devices counted`);
  check((await overview.getAttribute("data-cells")) === down, "only the down devices drawn");
  const firstRow = page.getByTestId("node-row").first();
  const downNode = await firstRow.getAttribute("data-node");
  check((await page.locator(`[data-testid^="cell-${downNode}-"][data-health="down"]`).count()) === 1,
        "the first node listed has its down device");

  // Drill down: group by rack, open the first rack (the one with most in need).
  await page.getByTestId("focus-all").click();
  await page.getByTestId("group-by-rack").click();
  const group = page.getByTestId("group-row").first();
  const rack = await group.getAttribute("data-key");
  await group.click();
  await page.getByTestId("selected-group").waitFor();
  check((await page.getByTestId("selected-group").innerText()).includes(rack), `${rack} opened`);
  const inRack = Number(await count.getAttribute("data-nodes"));
  check(inRack > 0 && inRack < Number(nodes), `only ${rack}'s nodes shown (${inRack})`);
  check((await overview.getAttribute("data-nodes")) === String(inRack), "the overview too");
  await page.screenshot({ path: join(shots, "cluster-group.png") });

  // A click on the overview's first device opens its node: the first node of the rack in
  // the order, the one with a down device.
  const first = await page.getByTestId("node-row").first().getAttribute("data-node");
  const [x, y] = (await overview.getAttribute("data-first-cell")).split(",").map(Number);
  await canvas.scrollIntoViewIfNeeded(); // (opening the group scrolled to its row)
  const area = await canvas.boundingBox();
  await timed("open_node_ms", async () => {
    await page.mouse.click(area.x + x, area.y + y);
    await page.getByTestId("device-table").waitFor({ timeout: 60000 });
  });
  check(page.url().endsWith(`#/node/${first}`), `the node's page opened (${page.url()})`);
  check((await page.getByTestId("node-title").innerText()).length > 0, "the node's title");
  check((await page.locator('[data-testid="device-table"] tbody tr').count()) === 8,
        "its 8 devices listed");
  const healths = await page.locator('[data-testid="device-table"] [data-testid="health"]')
    .allInnerTexts();
  check(healths.includes("down"), `its down device shown down (${healths})`);
  await page.screenshot({ path: join(shots, "node-scale.png") });
  console.log(`scale: ${checks.passed} checks passed; ${JSON.stringify(timings)}`);
  console.log(`TIMINGS ${JSON.stringify(timings)}`);
} catch (error) {
  await failed("scale", page, shots, error);
} finally {
  await context.close();
}
