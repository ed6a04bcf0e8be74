// The Limits page in a real headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core): it lists the limiters a Python, a Node and a C process created, its numbers
// move while they run, it shows what is in use now (a concurrent limiter's holders with their
// lease ages and its waiters, the busiest keys of the others) and the last hour as a chart, and
// reset and overrides work with the token and are refused without it. It speaks plainly and
// fits the screen: each spec in words with its JSON a click away, charts with readable axes,
// every figure of a limiter's detail naming the key it is for, no sideways scroll at 1,400 px,
// and a phone's width stacks each limiter into a card.
// scripts/test-web starts Redis, the three load processes and `ratekeeper serve`, then this.
//
// Env: RK_BASE_URL (the server), RK_TOKEN (its token), RK_REDIS_URL (the Redis, where this
// script holds a lease and waits for another through the Node package), RK_SCREENSHOT (PNG to
// write), RK_CHROMIUM (default /usr/bin/chromium).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";

import { chromium } from "playwright-core";

const base = process.env.RK_BASE_URL;
const token = process.env.RK_TOKEN;
const redisUrl = process.env.RK_REDIS_URL;
assert.ok(base && token && redisUrl, "RK_BASE_URL, RK_TOKEN and RK_REDIS_URL are required (scripts/test-web sets them)");
const rk = createRequire(import.meta.url)("../../node");
// A generous hang guard for things that take a poll or two (2 s each), never a timing check.
const HANG = 60_000;

const userDataDir = mkdtempSync(path.join(tmpdir(), "ratekeeper-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.RK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
  viewport: { width: 1400, height: 420 },
});
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(HANG);
const failedRequests = [];
page.on("requestfailed", (r) => failedRequests.push(r.url()));
page.on("pageerror", (e) => failedRequests.push(`page error: ${e.message}`));

let step = "";
const steps = [];
function begin(name) {
  step = name;
  steps.push(name);
  console.log(`web: ${name}`);
}

const row = (name) => `tr[data-name="${name}"]`;
const cell = async (name, column) => (await page.locator(`${row(name)} .${column}`).first().textContent()).trim();
// Whether the page scrolls sideways at the current viewport.
const sideways = () => page.evaluate(() => document.documentElement.scrollWidth > document.documentElement.clientWidth);
const count = (text) => Number(text.replace(/,/g, ""));
// The value shown for `label` in one of the page's <dl> blocks.
const dd = (list, label) =>
  page.evaluate(
    ([list, label]) => {
      const dt = [...document.querySelectorAll(`${list} dt`)].find((d) => d.textContent === label);
      return dt ? dt.nextElementSibling.textContent : null;
    },
    [list, label],
  );
const waitForDd = (list, label, expected) =>
  page.waitForFunction(
    ([list, label, expected]) => {
      const dt = [...document.querySelectorAll(`${list} dt`)].find((d) => d.textContent === label);
      return dt && dt.nextElementSibling.textContent === expected;
    },
    [list, label, expected],
  );
// Clicks a form's button and waits for the page to report the outcome (cleared first, so an
// earlier identical message cannot satisfy the wait).
async function act(selector, pattern) {
  await page.evaluate(() => {
    document.querySelector("#action-result").textContent = "";
  });
  await page.click(selector);
  // Any outcome ends the wait; then it must be the expected one.
  await page.waitForFunction(() => document.querySelector("#action-result").textContent !== "");
  assert.match(await page.locator("#action-result").textContent(), pattern);
}

try {
  begin("the page lists the limiters of a Python, a Node and a C process");
  await page.goto(base);
  const languages = { "py-uploads": /^python 3\./, "node-api": /^node \d+/, "c-reports": /^c ratekeeper\// };
  for (const [name, language] of Object.entries(languages)) {
    await page.waitForSelector(row(name));
    const users = (await page.locator(`${row(name)} .user-list`).textContent()).split(", ");
    assert.ok(users.some((u) => language.test(u)), `${name} users: ${users}`);
  }
  assert.equal(await cell("c-reports", "kind"), "concurrent");

  begin("each spec in words, its JSON one click away");
  // A calendar limiter with a billing day, made here (through the Node package).
  const billingBackend = rk.Backend.redis(redisUrl);
  const billing = billingBackend.limiter("billing", { kind: "calendar", limit: 1000, period: "month", tz: "Europe/Berlin", anchor: 15 });
  await billing.check("acct-1");
  await billingBackend.flush();
  await page.waitForSelector(row("billing"));
  const words = {
    "py-uploads": "5 per second, bursts of 10",
    "node-api": "1,000 per hour",
    "c-reports": "2 at once, reclaimed after 30 s",
    billing: "1,000 per billing month from the 15th, Europe/Berlin",
  };
  for (const [name, text] of Object.entries(words)) {
    assert.equal(await page.locator(`${row(name)} td.spec summary`).textContent(), text);
    assert.equal(await page.locator(`${row(name)} td.spec code`).isVisible(), false, `${name}: JSON hidden until asked`);
  }
  await page.click(`${row("py-uploads")} td.spec summary`);
  assert.equal(await page.locator(`${row("py-uploads")} td.spec code`).textContent(), '{"capacity":10,"kind":"token_bucket","rate":5}');
  assert.ok(await page.locator(`${row("py-uploads")} td.spec code`).isVisible());

  begin("a limiter in shadow mode says so, with its shadow refusals");
  // One call an hour, checked three times in shadow mode: two would-be refusals, admitted.
  const shadow = billingBackend.limiter("rollout", { kind: "window", limit: 1, interval: 3600, shadow: true });
  for (let i = 0; i < 3; i++) assert.equal((await shadow.check("acct-1")).allowed, true);
  await billingBackend.flush();
  await page.waitForSelector(`${row("rollout")} .total-shadow`);
  assert.equal(await page.locator(`${row("rollout")} td.spec summary`).textContent(), "1 per hour, in shadow mode");
  assert.equal(await cell("rollout", "total-shadow"), "(2 shadow-refused)");
  assert.equal(await cell("rollout", "total-refused"), "0", "nothing was refused");

  begin("the numbers move while the load runs");
  for (const name of Object.keys(languages)) {
    const before = count(await cell(name, "total-allowed"));
    await page.waitForFunction(
      ([sel, before]) => Number(document.querySelector(sel).textContent.replace(/,/g, "")) > before,
      [`${row(name)} .total-allowed`, before],
    );
  }
  // The token bucket of 5/s checked 50 times a second refuses most calls.
  await page.waitForFunction((sel) => Number(document.querySelector(sel).textContent.replace(/,/g, "")) > 0, `${row("py-uploads")} .total-refused`);

  // The last minute's counts (over fewer seconds while the page has run for less than one).
  await page.waitForFunction(
    (sel) => /^[1-9][\d,]* in \d+s$/.test(document.querySelector(sel).textContent),
    `${row("c-reports")} .minute-allowed`,
  );

  begin("a concurrent limiter shows its holders (C and Node), their lease ages, and a waiter");
  // The C process holds one slot of c-reports' key "batch" all along; this script takes the
  // other (through the Node package), then waits for a third.
  const backend = rk.Backend.redis(redisUrl);
  const reports = backend.limiter("c-reports", { kind: "concurrent", limit: 2, lock_timeout: 30 });
  const held = await reports.acquire("batch", { waitTimeoutMs: 30_000 });
  const waiting = reports.acquire("batch", { waitTimeoutMs: 60_000 });
  const usage = `${row("c-reports")} td.usage`;
  await page.waitForFunction(
    (sel) => /^2 held on batch \(ages [^)]+\), 1 waiting$/.test(document.querySelector(sel).textContent),
    usage,
  );

  begin("the busiest keys of the counting limiters");
  await page.waitForFunction(
    (sel) => /^k [\d,]+\/1,000, tenant-7 3\/1,000$|^tenant-7 3\/1,000, k [12]\/1,000$/.test(document.querySelector(sel).textContent),
    `${row("node-api")} td.usage`,
  );
  assert.match(await cell("py-uploads", "usage"), /^user-1 \d+\/10$/);

  begin("the last hour as a chart, per minute");
  for (const name of Object.keys(languages)) {
    assert.equal(await page.locator(`${row(name)} svg.history g`).count(), 60, `${name}: 60 minutes`);
    await page.waitForFunction(
      (sel) => [...document.querySelectorAll(sel)].some((r) => Number(r.getAttribute("height")) > 0),
      `${row(name)} svg.history rect.allowed`,
    );
  }
  await page.waitForFunction(
    (sel) => [...document.querySelectorAll(sel)].some((r) => Number(r.getAttribute("height")) > 0),
    `${row("py-uploads")} svg.history rect.refused`,
  );

  // The list's chart says what its ends and its height are.
  const caption = await page.locator(`${row("node-api")} figure.spark figcaption span`).allTextContents();
  assert.equal(caption.length, 3);
  assert.equal(caption[0], "60 min ago");
  assert.match(caption[1], /^peak [\d,]+\/min$/);
  assert.equal(caption[2], "now");

  begin("no sideways scroll at 1,400 px; every column in view");
  assert.equal(await sideways(), false, "the list scrolls sideways at 1,400 px");
  // Read from the live row (the list is redrawn every poll): each cell ends within the window.
  const inView = (sel, width) =>
    page.waitForFunction(
      ([sel, width]) => {
        const box = document.querySelector(sel).getBoundingClientRect();
        return box.width > 0 && box.left >= 0 && box.right <= width;
      },
      [sel, width],
    );
  for (const column of ["usage", "chart"]) await inView(`${row("c-reports")} td.${column}`, 1400);
  if (process.env.RK_SCREENSHOT) {
    await page.screenshot({ path: process.env.RK_SCREENSHOT, fullPage: true });
  }

  begin("a phone's width: no sideways scroll, each limiter a card of labelled lines");
  await page.setViewportSize({ width: 390, height: 800 });
  assert.equal(await sideways(), false, "the list scrolls sideways at 390 px");
  await inView(`${row("billing")} td.spec`, 390);
  // Each line labelled with its column (read from the live row: the list is redrawn every poll).
  await page.waitForFunction(
    (sel) => getComputedStyle(document.querySelector(sel), "::before").content === '"Limit"',
    `${row("billing")} td.spec`,
  );
  if (process.env.RK_SCREENSHOT) {
    await page.screenshot({ path: process.env.RK_SCREENSHOT.replace(/\.png$/, "-phone.png"), fullPage: true });
  }
  await page.setViewportSize({ width: 1400, height: 420 });

  begin("a concurrent limiter's detail lists its holders with fencing tokens, and its waiter");
  await page.click(`${row("c-reports")} a`);
  // The limiter's own key has no holder, and the page says so, naming the key that has them:
  // "batch", one click away.
  await page.waitForFunction(() => document.querySelector("#concurrent-summary").textContent.startsWith("0 held on the limiter's own key (no key), 0 waiting."));
  assert.match(await page.locator("#concurrent-summary").textContent(), /The busiest key is batch \(2 of 2 in use\)/);
  assert.equal(await page.locator("#concurrent-key").textContent(), "the limiter's own key (no key)");
  assert.equal(await dd("#detail-info", "allowed, all keys") !== null, true);
  await page.click("#busiest a.inspect-key");
  await page.waitForFunction(() => document.querySelector("#concurrent-summary").textContent === "2 held on key batch, 1 waiting.");
  assert.equal(await page.locator("#concurrent-key").textContent(), "key batch");
  const holders = await page.locator("#holders tbody tr").evaluateAll((rows) =>
    rows.map((r) => [...r.querySelectorAll("td")].map((td) => td.textContent)),
  );
  assert.equal(holders.length, 2);
  for (const [lease, fencingToken, age, expiresIn] of holders) {
    assert.match(lease, /^[0-9a-f]{8}$/);
    assert.match(fencingToken, /^\d{16,}$/);
    assert.match(age, /^[\dhms. ]+$/);
    assert.match(expiresIn, /^[\dhms. ]+$/);
  }
  // Oldest grant first: the C process's lease, then this script's (a later, greater token).
  assert.ok(BigInt(holders[0][1]) < BigInt(holders[1][1]), `${holders}`);
  assert.ok(holders.some((h) => h[1] === String(held.lease.fencingToken)), `${holders} has ${held.lease.fencingToken}`);
  assert.equal(await page.locator("#history-chart svg.history g").count(), 60);
  // Its axes: counts per minute from 0 to a round top, and clock times every 15 minutes to "now".
  const yLabels = await page.locator("#history-chart text.axis.y").allTextContents();
  assert.equal(yLabels[0], "0");
  assert.ok(yLabels.length === 3 && yLabels.every((t) => /^[\d,.]+$/.test(t)), `${yLabels}`);
  const xLabels = await page.locator("#history-chart text.axis.x").allTextContents();
  assert.equal(xLabels.at(-1), "now");
  assert.ok(xLabels.slice(0, -1).every((t) => /^\d\d:\d\d$/.test(t)) && xLabels.length >= 4, `${xLabels}`);
  assert.match(await page.locator("#usage h3").first().textContent(), /^Last hour, all keys/);
  assert.equal(await page.locator("#busiest tbody tr td").first().textContent(), "batch");
  assert.equal(await dd("#inspect-result", "key"), "batch");

  begin("a release hands the slot to the waiter, and the page follows");
  await reports.release(held.lease);
  const granted = await waiting;
  await page.waitForFunction(() => document.querySelector("#concurrent-summary").textContent === "2 held on key batch, 0 waiting.");
  await reports.release(granted.lease);
  await page.goto(`${base}#/`);

  begin("a limiter's detail inspects a key");
  await page.click(`${row("node-api")} a`);
  await page.waitForFunction(() => document.querySelector("#detail-name").textContent.startsWith("node-api"));
  await page.fill("#inspect-form input[name=key]", "tenant-7");
  await page.click("#inspect-form button");
  await waitForDd("#inspect-result", "key", "tenant-7");
  await waitForDd("#inspect-result", "remaining", "997");
  assert.equal(await dd("#inspect-result", "limit"), "1,000");

  begin("reset is refused without the token, and with a wrong one");
  await page.fill("#token", "");
  await page.fill("#reset-form input[name=key]", "tenant-7");
  await act("#reset-form button", /^refused: a reset or override needs the header/);
  await page.fill("#token", "not-the-token");
  await act("#reset-form button", /^refused: a reset or override needs the header/);
  await page.fill("#override-form input[name=key]", "tenant-7");
  await page.fill("#override-form textarea", '{"kind":"window","limit":2000,"interval":3600}');
  await act("#override-form button[value=set]", /^refused: a reset or override needs the header/);
  // Two more polls: nothing changed.
  await page.waitForTimeout(4500);
  assert.equal(await dd("#inspect-result", "remaining"), "997");
  assert.equal(await dd("#inspect-result", "limit"), "1,000");

  begin("reset works with the token");
  await page.fill("#token", token);
  await act("#reset-form button", /^reset tenant-7$/);
  await waitForDd("#inspect-result", "remaining", "1,000");

  begin("a block refuses the key until unblocked, with the token");
  await page.fill("#block-form input[name=key]", "tenant-7");
  await page.fill("#block-form input[name=seconds]", "600");
  await act("#block-form button[value=block]", /^blocked tenant-7 for 600s$/);
  await waitForDd("#inspect-result", "remaining", "0");
  await act("#block-form button[value=unblock]", /^unblocked tenant-7$/);
  await waitForDd("#inspect-result", "remaining", "1,000");
  await act("#block-form button[value=unblock]", /^tenant-7 was not blocked$/);

  begin("an override works with the token, and clears");
  await act("#override-form button[value=set]", /^override set$/);
  await waitForDd("#inspect-result", "limit", "2,000");
  await waitForDd("#inspect-result", "deciding spec", '2,000 per hour{"interval":3600,"kind":"window","limit":2000}');
  assert.match(await dd("#detail-info", "overrides"), /^tenant-7: 2,000 per hour$/);
  await act("#override-form button[value=clear]", /^override cleared$/);
  await waitForDd("#inspect-result", "limit", "1,000");

  begin("a bad spec is refused with the parameter named");
  await page.fill("#override-form textarea", '{"kind":"window","limit":0,"interval":3600}');
  await act("#override-form button[value=set]", /^refused: invalid argument `limit`/);

  assert.deepEqual(failedRequests, [], "every request of the page succeeded (no CDN, no missing asset)");
  console.log(`web: ok (${steps.length} steps)`);
} catch (e) {
  console.error(`web: FAILED at "${step}"`);
  await page.screenshot({ path: path.join(tmpdir(), "ratekeeper-web-failure.png"), fullPage: true }).catch(() => {});
  console.error(`web: screenshot of the failure: ${path.join(tmpdir(), "ratekeeper-web-failure.png")}`);
  throw e;
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
