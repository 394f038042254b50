// What the browser tests share: Debian's Chromium through playwright-core in a throwaway
// profile, and checks that count themselves.
import { chromium } from "playwright-core";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const checks = { passed: 0 };

export function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
  checks.passed += 1;
}

// A headless Chromium (CHROMIUM, else /usr/bin/chromium) and one page in it.
export async function openBrowser({ width = 1440, height = 900 } = {}) {
  const profile = mkdtempSync(join(tmpdir(), "chromium-profile-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    viewport: { width, height },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return { context, page: await context.newPage() };
}

// A failed run: a screenshot of the page as it was, the reason, and a failing exit status.
export async function failed(name, page, shots, error) {
  await page.screenshot({ path: join(shots, "failure.png"), fullPage: true }).catch(() => {});
  console.error(`${name}: ${error.message} (after ${checks.passed} checks; see ${shots}/failure.png)`);
  process.exitCode = 1;
}
