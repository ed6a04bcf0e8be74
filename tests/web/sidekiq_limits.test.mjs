// Sidekiq's Web UI with ratekeeper's "Limits" tab (ruby/lib/ratekeeper/sidekiq/web.rb) in a real
// headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core, as limits.test.mjs
// drives the CLI's page): the tab is in Sidekiq's navigation, and its table lists the limiters
// that Ruby, Python, Node and C processes registered on the Redis, with kind, spec, overrides,
// counts and users. Run by ruby/test/sidekiq_web_test.rb (scripts/test-ruby).
//
// Env: RK_BASE_URL (the Web UI's root), RK_EXPECT (JSON: [{name, kind, user, override?}]),
// RK_SCREENSHOT (PNG to write, optional), RK_CHROMIUM (default /usr/bin/chromium).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { chromium } from "playwright-core";

const base = process.env.RK_BASE_URL;
const expected = JSON.parse(process.env.RK_EXPECT ?? "[]");
assert.ok(base && expected.length, "RK_BASE_URL and RK_EXPECT are required");

const userDataDir = mkdtempSync(path.join(tmpdir(), "ratekeeper-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.RK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
  viewport: { width: 1400, height: 700 },
});
let failed = 0;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(60_000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));

  await page.goto(base);
  // The tab is in Sidekiq's own navigation bar, next to Busy, Queues, Retries...
  const tab = page.locator("ul.nav a", { hasText: "Limits" }).first();
  assert.equal(await tab.count(), 1, "no Limits tab in Sidekiq's navigation");
  await tab.click();
  await page.waitForURL(/\/limits$/);
  await page.locator("table#limits").waitFor();
  assert.equal(await page.locator("#limits-error").count(), 0, "the page reported an error");

  for (const want of expected) {
    const row = page.locator(`tr[data-limiter="${want.name}"]`);
    assert.equal(await row.count(), 1, `no row for ${want.name}`);
    const text = async (column) => (await row.locator(`td.${column}`).textContent()).trim();
    assert.equal(await text("kind"), want.kind, `${want.name}: kind`);
    assert.ok((await text("users")).includes(want.user), `${want.name}: users ${await text("users")} lack ${want.user}`);
    assert.ok(Number(await text("allowed")) > 0, `${want.name}: nothing allowed shown`);
    if (want.override) assert.ok((await text("overrides")).includes(want.override), `${want.name}: override`);
    console.log(`sidekiq web: ${want.name} (${want.kind}, ${await text("users")}) listed`);
  }
  // The tab is active while its page is shown.
  assert.equal(await page.locator("ul.nav li.active a", { hasText: "Limits" }).count() > 0, true, "the Limits tab is not active");
  if (process.env.RK_SCREENSHOT) await page.screenshot({ path: process.env.RK_SCREENSHOT, fullPage: true });
  assert.deepEqual(errors, [], "page errors");
} catch (e) {
  failed = 1;
  console.error(e);
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
console.log(`${1 - failed} passed, ${failed} failed`);
process.exit(failed);
