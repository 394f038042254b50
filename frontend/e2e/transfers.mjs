// Browser test of the Transfers view, driven by pytest (tests/test_dashboard_transfers.py):
// Debian's Chromium against the module in a real Ray dashboard whose cluster has a stalled
// Ray Direct Transport transfer. From the job's workloads page and from the node page to
// the view, which must show the stalled transfer with its two actors, their devices and
// node, its age and the job's counts; the findings list the stall. Saves transfers.png.
// Environment: BASE_URL, TOKEN, SHOTS (folder), JOB, NODE, MIN_AGE_S, PRODUCER and
// CONSUMER (JSON: actor_id, actor_class, device: the index of the GPU it holds).
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, checks, openBrowser } from "./harness.mjs";

const base = process.env.BASE_URL;
const shots = process.env.SHOTS ?? mkdtempSync(join(tmpdir(), "shots-"));
const job = process.env.JOB;
const node = process.env.NODE;
const minAge = Number(process.env.MIN_AGE_S ?? "0");
const producer = JSON.parse(process.env.PRODUCER);
const consumer = JSON.parse(process.env.CONSUMER);
mkdirSync(shots, { recursive: true });

// "42 s", "3 min 5 s", "2 h 10 min" (format.ts `duration`) back to seconds.
function seconds(text) {
  const units = { h: 3600, min: 60, s: 1 };
  return [...text.matchAll(/(\d+) (h|min|s)\b/g)].reduce((sum, [, n, u]) => sum + Number(n) * units[u], 0);
}

// The stalled transfer's row shows both actors, each with its device and node.
async function checkStalledRow(page, where) {
  const row = page.locator('[data-testid="transfer"][data-stalled="true"]').first();
  await row.waitFor({ timeout: 60000 });
  const source = await row.getByTestId("transfer-source").innerText();
  const destination = await row.getByTestId("transfer-destination").innerText();
  check(source.includes(producer.actor_class) && source.includes(producer.actor_id.slice(0, 8)),
        `${where}: the sending actor (${source})`);
  check(destination.includes(consumer.actor_class) && destination.includes(consumer.actor_id.slice(0, 8)),
        `${where}: the receiving actor (${destination})`);
  check(source.includes(`device ${producer.device} on`), `${where}: the sender's device (${source})`);
  check(destination.includes(`device ${consumer.device} on`),
        `${where}: the receiver's device (${destination})`);
  check((await row.getByTestId("transfer-state").innerText()) === "STALLED", `${where}: marked stalled`);
  const age = await row.getByTestId("transfer-age").innerText();
  check(seconds(age) >= minAge, `${where}: its age (${age}) past the stall threshold`);
  const devices = row.getByTestId("end-device");
  check((await devices.first().getAttribute("href")) === `#/node/${node}`, `${where}: the device links to its node`);
  return row;
}

const { context, page } = await openBrowser();
try {
  const refused = await context.request.get(`${base}/accelerators/api/transfers`);
  check(refused.status() === 401, `the API without the token answers 401 (got ${refused.status()})`);
  const login = await context.request.post(`${base}/api/authenticate`, {
    headers: { Authorization: `Bearer ${process.env.TOKEN}` } });
  check(login.ok(), "Ray's /api/authenticate accepts the token");

  // From the job's workloads page to its transfers.
  await page.goto(`${base}/accelerators/#/workloads/${job}`);
  await page.getByTestId("job-transfers-link").click();
  await page.waitForURL(`**/#/transfers/job/${job}`);
  await checkStalledRow(page, "the job's transfers");
  const jobRow = page.getByTestId(`transfers-job-${job}`);
  check(Number(await jobRow.getByTestId("job-in-flight").innerText()) >= 1, "the job's in-flight count");
  check(Number(await jobRow.getByTestId("job-stalled").innerText()) >= 1, "the job's stalled count");
  check(seconds(await jobRow.getByTestId("job-oldest").innerText()) >= minAge, "the job's oldest age");
  check(Number(await page.getByTestId("transfers-stalled").innerText()) >= 1, "the stalled total");
  check((await page.getByTestId("transfers-pairing").innerText()).includes("Paired by the agent on"),
        "says which agent pairs the transfers");

  // The whole cluster's view: the picture.
  await page.getByTestId("transfers-scope").getByText("all transfers").click();
  await page.waitForURL("**/#/transfers");
  await checkStalledRow(page, "the cluster's transfers");
  await page.mouse.move(0, 0);
  await page.screenshot({ path: join(shots, "transfers.png"), fullPage: true });

  // From the node page to the transfers with an end on that node.
  await page.goto(`${base}/accelerators/#/node/${node}`);
  await page.getByTestId("node-transfers-link").click();
  await page.waitForURL(`**/#/transfers/node/${node}`);
  await checkStalledRow(page, "the node's transfers");
  check((await page.getByTestId("transfers-scope").innerText()).includes("all transfers"),
        "the node's view says it is one node's");

  // The finding names both actors and leads back to the view.
  await page.getByTestId("tab-findings").click();
  const finding = page.locator('[data-testid="finding"][data-kind="transfer_stalled"]').first();
  await finding.waitFor({ timeout: 30000 });
  const text = await finding.innerText();
  check(text.includes(producer.actor_class) && text.includes(consumer.actor_class),
        `the stall finding names both actors (${text})`);
  check(/stalled for \d+ s/.test(text), `the stall finding gives the age (${text})`);
  await finding.getByTestId("finding-transfers-link").click();
  await page.waitForURL("**/#/transfers");
  console.log(`transfers: ${checks.passed} checks passed; screenshot in ${shots}`);
} catch (error) {
  await page.screenshot({ path: join(shots, "transfers-failure.png"), fullPage: true }).catch(() => {});
  console.error(`transfers: ${error.message} (after ${checks.passed} checks; see ${shots}/transfers-failure.png)`);
  process.exitCode = 1;
} finally {
  await context.close();
}
