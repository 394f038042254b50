// Browser test of a node page whose node the head stops knowing (its agent's record gone
// with its node), driven by pytest (tests/test_dashboard_node_gone.py): the page must say
// so, not keep showing the node's last values as if current. Its devices' long model name
// must not widen the page past the window.
// Environment: BASE_URL, NODE_ID, SHOTS (folder). Prints "shown" once the node's devices
// are on screen, then waits for the test to write a line to its standard input.
import { mkdirSync, mkdtempSync } from "node:fs";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, checks, failed, openBrowser } from "./harness.mjs";

const base = process.env.BASE_URL;
const nodeId = process.env.NODE_ID;
const shots = process.env.SHOTS ?? mkdtempSync(join(tmpdir(), "shots-"));
mkdirSync(shots, { recursive: true });

const { context, page } = await openBrowser();
try {
  await page.goto(`${base}/accelerators/#/node/${nodeId}`);
  await page.getByTestId("device-table").waitFor({ timeout: 60000 });
  check((await page.locator('[data-testid="device-table"] tbody tr').count()) > 0,
        "the node's devices are shown");
  const [scrolled, wide] = await page.evaluate(
    () => [document.documentElement.scrollWidth, window.innerWidth]);
  check(scrolled <= wide, `a long model name stays within the window (${scrolled} > ${wide})`);
  console.log("shown");
  const input = createInterface({ input: process.stdin });
  await once(input, "line");
  input.close();
  await page.getByTestId("node-error").waitFor({ timeout: 60000 });
  check((await page.getByTestId("node-error").innerText()).includes("unknown node"),
        "the page says the node is no longer known");
  check((await page.getByTestId("device-table").count()) === 0,
        "no device values are left on screen");
  console.log(`node_gone: ${checks.passed} checks passed`);
} catch (error) {
  await failed("node_gone", page, shots, error);
} finally {
  await context.close();
}
