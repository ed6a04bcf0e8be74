#!/usr/bin/env node
// The HTTP middleware's per-request native calls, each against the JavaScript it replaced, in
// one run: the rate-limit header fields (draft-11, one limiter, as bench.js's apps use), the
// same with draft-11's `pk`, and the client key. Each is timed four ways where they exist:
//   - `old JS`: node/http/headers.js, client-address.js and partition-key.js as they were before
//     the rules moved into the core, read from git history (OLD_REV) and run as they ran;
//   - `napi-rs`: NativeHttpRules's methods (`fields`, `clientKey`), napi-rs's class glue, the
//     fields with node/http/core.js's `rateLimitFields` as it was then (NAPI_REV);
//   - `hot`: the plain N-API functions bound to the rules that the middleware calls
//     (`fieldsFunction()`, `clientKeyFunction()`; node/src/http.rs);
//   - `memo` (client key): what the middleware does per request, a lookup of keys lately seen.
// Every variant includes the JavaScript around its call (packing the decisions, splitting the
// answer into pairs). Variants run in short interleaved batches, ROUNDS times; the median
// batch counts. On a shared or loaded machine read the ratios, not the nanoseconds. Not a test;
// writes nothing.
//
//   node node/scripts/build.js && node bench/node/http/fields.js
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROUNDS = Number(process.env.BENCH_ROUNDS || 15);
const BATCH = Number(process.env.BENCH_BATCH || 20000);
/** The last commit with the middleware's rules in JavaScript. */
const OLD_REV = process.env.OLD_REV || 'a12ea82~1';
/** The last commit whose middleware called the rules through napi-rs's methods. */
const NAPI_REV = process.env.NAPI_REV || '97b6f4f';

const root = path.resolve(__dirname, '..', '..', '..');
const rk = require(path.join(root, 'node'));
const { NativeHttpRules } = require(path.join(root, 'node', 'addon.js'));
const { buildCore, rateLimitFields } = require(path.join(root, 'node', 'http', 'core.js'));

/** The old JavaScript modules, written out of git history into a scratch folder and loaded. */
function oldModules() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rk-old-http-'));
  try {
    for (const name of ['headers.js', 'client-address.js', 'partition-key.js', 'errors.js']) {
      const text = execFileSync('git', ['show', `${OLD_REV}:node/http/${name}`], { cwd: root, encoding: 'utf8' });
      fs.writeFileSync(path.join(dir, name), text.replaceAll("require('../index.js')", `require(${JSON.stringify(path.join(root, 'node', 'index.js'))})`));
    }
    const load = (name) => require(path.join(dir, name));
    return { headers: load('headers.js'), clients: load('client-address.js'), partition: load('partition-key.js') };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** `rateLimitFields` of node/http/core.js at NAPI_REV (loaded beside today's, then removed). */
function napiRateLimitFields() {
  const file = path.join(root, 'node', 'http', `.core-${process.pid}.js`);
  fs.writeFileSync(file, execFileSync('git', ['show', `${NAPI_REV}:node/http/core.js`], { cwd: root, encoding: 'utf8' }));
  try {
    return require(file).rateLimitFields;
  } finally {
    fs.rmSync(file, { force: true });
  }
}

const old = oldModules();
const napiFields = napiRateLimitFields();
const SECRET = 'a partition key secret of 32 b.';
const limiter = rk.Backend.memory().bucket('api', 1e9, '60s');
const decision = limiter.checkSync('203.0.113.7');
const reports = [{ index: 0, decision }];
const peer = '203.0.113.7';
const noHeader = () => undefined;

/** The old per-request fields: members of each decision, then the fields of the form. */
function oldFields(entry, pkOf, key) {
  const policies = [];
  for (const { decision: d } of reports) policies.push(...old.headers.members(entry.name, entry.shape, d));
  return old.headers.rateLimitFields('draft-11', policies, pkOf === null ? null : pkOf(key));
}

function scenario(name, partitioned) {
  const secret = partitioned ? Buffer.from(SECRET) : null;
  const rules = new NativeHttpRules('draft-11', [], 'X-Forwarded-For', secret, [{ name: 'api', windowMs: limiter.windowMs }]);
  const hot = rules.fieldsFunction();
  const entry = { name: 'api', shape: old.headers.policyShape(limiter) };
  const pkOf = partitioned ? old.partition.partitionKeyOf(SECRET, 'draft-11') : null;
  const key = partitioned ? peer : undefined;
  const same = [oldFields(entry, pkOf, peer), napiFields(rules, reports, key), rateLimitFields(hot, reports, key)];
  if (!same.every((f) => JSON.stringify(f) === JSON.stringify(same[0]))) throw new Error(`${name}: the variants disagree: ${JSON.stringify(same)}`);
  return {
    name,
    variants: {
      'old JS': () => oldFields(entry, pkOf, peer).length,
      'napi-rs': () => napiFields(rules, reports, key).length,
      hot: () => rateLimitFields(hot, reports, key).length,
    },
  };
}

function clientKeyScenario() {
  const rules = new NativeHttpRules('draft-11', [], 'X-Forwarded-For', null, []);
  const hot = rules.clientKeyFunction();
  const trusted = old.clients.trustedProxyList([]);
  const core = buildCore({ limiter });
  return {
    name: 'client key (no trusted proxy)',
    variants: {
      'old JS': () => old.clients.clientKey(peer, noHeader, trusted, 'x-forwarded-for').length,
      'napi-rs': () => rules.clientKey(peer, null).length,
      hot: () => hot(peer, null).length,
      // core.key is async (keyGenerator may be): its promise is what a request awaits.
      'memo (middleware)': () => (core.key(null, peer, noHeader), 1),
    },
  };
}

/** Nanoseconds per call of `f`, over one batch. */
function batch(f) {
  let sink = 0;
  const start = process.hrtime.bigint();
  for (let i = 0; i < BATCH; i++) sink += f();
  const ns = Number(process.hrtime.bigint() - start) / BATCH;
  if (sink < 0) console.log(sink);
  return ns;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const scenarios = [scenario('fields, draft-11, one limiter', false), scenario('fields, draft-11 with pk', true), clientKeyScenario()];
console.log(`load average ${fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}; ${ROUNDS} rounds of ${BATCH} calls; medians`);
for (const s of scenarios) {
  const times = Object.fromEntries(Object.keys(s.variants).map((v) => [v, []]));
  for (const f of Object.values(s.variants)) batch(f); // warm up
  for (let round = 0; round < ROUNDS; round++) {
    for (const [v, f] of Object.entries(s.variants)) times[v].push(batch(f));
  }
  const base = median(times['old JS']);
  console.log(`\n${s.name}`);
  for (const [v, t] of Object.entries(times)) {
    const ns = median(t);
    console.log(`  ${v.padEnd(18)} ${ns.toFixed(0).padStart(6)} ns   ${(ns / base).toFixed(2)}x old JS`);
  }
}
