// Browser test of the Accelerators tab, driven by pytest (tests/test_dashboard_ray.py):
// Debian's Chromium through playwright-core, against the module running in a real Ray
// dashboard with the demo workload. Clicks through every view, checks what a person
// sees, and saves a screenshot of each view.
// Environment: BASE_URL, TOKEN, SHOTS (folder), EXPECT_DEVICES, EXPECT_IDLE_CLASS,
// EXPECT_LINKS (the node's links), EXPECT_SPINNING_CLASS (an actor spinning its GPU, if any).
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, checks, failed, openBrowser } from "./harness.mjs";

const base = process.env.BASE_URL;
const token = process.env.TOKEN;
const shots = process.env.SHOTS ?? mkdtempSync(join(tmpdir(), "shots-"));
const devices = process.env.EXPECT_DEVICES ?? "8";
const idleClass = process.env.EXPECT_IDLE_CLASS ?? "IdleHolder";
const links = process.env.EXPECT_LINKS ? Number(process.env.EXPECT_LINKS) : null;
const spinningClass = process.env.EXPECT_SPINNING_CLASS ?? "";
mkdirSync(shots, { recursive: true });

const { context, page } = await openBrowser();
try {
  // Behind Ray's token: refused without it, then signed in the way Ray's UI does.
  const refused = await context.request.get(`${base}/accelerators/`);
  check(refused.status() === 401, `page without the token answers 401 (got ${refused.status()})`);
  const login = await context.request.post(`${base}/api/authenticate`, {
    headers: { Authorization: `Bearer ${token}` } });
  check(login.ok(), "Ray's /api/authenticate accepts the token");

  // Cluster view: counts, the heatmap, the idle allocation flagged.
  await page.goto(`${base}/accelerators/#/`);
  await page.getByTestId("device-count").filter({ hasText: devices }).waitFor({ timeout: 60000 });
  check((await page.getByTestId("device-count").innerText()) === devices, `${devices} devices`);
  await page.getByTestId("idle-allocations").filter({ hasNotText: /^0$/ }).waitFor({ timeout: 60000 });
  const idleCell = page.locator('[data-testid^="cell-"][data-idle="true"]').first();
  await idleCell.waitFor({ timeout: 60000 });
  check((await page.locator('[data-testid^="cell-"]').count()) === Number(devices),
        "one heatmap cell per device");
  check((await page.getByTestId("group-header").first().innerText()).includes("NVLink domain"),
        "devices grouped by NVLink domain");
  const overview = page.getByTestId("overview");
  check((await overview.getAttribute("data-cells")) === devices,
        `the overview places every device (${await overview.getAttribute("data-cells")})`);
  check((await page.getByTestId("overview-count").getAttribute("data-shown")) === devices,
        "the overview reports every device shown");
  await page.getByTestId("metric-util").click();
  check((await page.getByTestId("legend-scale").count()) === 1, "the utilization scale in the legend");
  const down = "rgb(229, 57, 53)"; // HEALTH_COLORS.down
  const painted = await page.locator('[data-testid^="cell-"][data-health="ok"]').evaluateAll(
    (cells) => cells.map((c) => getComputedStyle(c).backgroundColor));
  check(painted.length > 0 && !painted.includes(down), `no healthy device painted down's red (${painted})`);
  await page.getByTestId("metric-health").click();
  check((await page.getByTestId("legend-down").count()) === 1, "health colours in the legend");
  await page.getByTestId("metric-util").click();
  await page.waitForTimeout(2500); // let the sparklines gather a few points
  await page.screenshot({ path: join(shots, "cluster.png"), fullPage: true });

  // Node view: devices, the idle holder, link bandwidth, topology, processes.
  await idleCell.click();
  await page.getByTestId("node-title").waitFor();
  await page.getByTestId("device-table").waitFor();
  check((await page.locator('[data-testid="device-table"] tbody tr').count()) === Number(devices),
        "a row per device");
  const idleHolder = page.locator('[data-testid="holder"][data-idle="true"]');
  await idleHolder.first().waitFor();
  check((await idleHolder.first().innerText()).includes(idleClass), `${idleClass} shown idle`);
  check((await idleHolder.first().locator('[data-testid="state"]').getAttribute("data-state")) === "idle",
        "the idle holder's chip says idle");
  const measured = page.locator('[data-testid="activity"][data-measured="true"]');
  await measured.first().waitFor({ timeout: 60000 });
  check(/GR \d+%/.test(await measured.first().innerText()), "engine activity per device");
  if (spinningClass) {
    // (the scenario may make other GPUs spin for a while too: look for this actor's row)
    const spinning = page.locator('[data-testid="holder"][data-spinning="true"]',
                                  { hasText: spinningClass });
    await spinning.first().waitFor({ timeout: 90000 });
    check((await spinning.first().innerText()).includes(spinningClass), `${spinningClass} shown spinning`);
    check((await spinning.first().locator('[data-testid="state"]').innerText()) === "SPINNING",
          "the spinning holder has its own chip");
    check(!(await spinning.first().innerText()).includes("BUSY"), "spinning is not busy");
    const busy = page.locator('[data-testid="holder"]:has([data-state="busy"])');
    check((await busy.count()) > 0, "holders that compute are busy, not spinning");
  }
  check((await page.getByTestId("memory-help").getAttribute("aria-label")).includes("reserved"),
        "the memory column explains Ray's reserved memory");
  if (links !== null) {
    const rows = await page.locator('[data-testid="links"] tbody tr').count();
    check(rows === links, `every link listed (${rows} of ${links})`);
  }
  const rates = await page.getByTestId("nvlink-rate").allInnerTexts();
  check(rates.length === Number(devices), "an NVLink rate per device");
  check(rates.some((r) => /\d+(\.\d)? [GM]B\/s/.test(r)), `NVLink bandwidth numbers (${rates[0]})`);
  check((await page.getByTestId("topology").innerText()).includes("NV18"), "NVLink topology matrix");
  check((await page.getByTestId("processes").innerText()).includes("Trainer"),
        "processes on each device carry their actor");
  const rayNode = await page.getByTestId("ray-node-link").getAttribute("href");
  check(rayNode.startsWith("/#/cluster/nodes/"), "link into Ray's node page");
  await page.mouse.move(0, 0); // no tooltip or hover state in the picture
  // The page's first screen (the whole page, with every link listed, is several metres long).
  await page.screenshot({ path: join(shots, "node.png") });
  await page.getByTestId("device-table").screenshot({ path: join(shots, "node-devices.png") });

  // Workloads: job -> actors/tasks -> devices, the idle one highlighted.
  await page.getByTestId("tab-workloads").click();
  await page.getByTestId("job-units").waitFor();
  const idleRow = page.locator('[data-testid="unit-device"][data-idle="true"]');
  await idleRow.first().waitFor();
  check((await idleRow.first().innerText()).includes("IDLE ALLOCATION"), "idle allocation flagged");
  check((await page.getByTestId("job-units").innerText()).includes(idleClass), `${idleClass} listed`);
  check((await page.getByTestId("job-units").innerText()).includes("preprocess"), "the GPU task listed");
  await page.screenshot({ path: join(shots, "workloads.png"), fullPage: true });

  // Findings: the idle allocation is among them.
  await page.getByTestId("tab-findings").click();
  const idleFinding = page.locator('[data-testid="finding"][data-kind="idle_allocation"]');
  await idleFinding.first().waitFor();
  check((await idleFinding.first().innerText()).includes(idleClass), "idle allocation finding");
  await page.screenshot({ path: join(shots, "findings.png"), fullPage: true });
  console.log(`browser: ${checks.passed} checks passed; screenshots in ${shots}`);
} catch (error) {
  await failed("browser", page, shots, error);
} finally {
  await context.close();
}
