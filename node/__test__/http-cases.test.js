'use strict';
// The shared HTTP rules (tests/http/cases.json) through the Node middleware: the client key, the
// rate-limit header fields, what `count` charges and refunds, and the limiter facts the
// middleware asks. Python (py/tests/http/test_cases.py), Ruby (ruby/test/rack_cases_test.rb) and
// the core (core/tests/http.rs) run the same table. Durations are seconds in the table and
// milliseconds here, the unit of the Node API.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Backend, ManualClock } = require('..');
const { NativeHttpRules } = require('../addon.js');
const { buildCore, rateLimitFields } = require('../http/core.js');

const TABLE = JSON.parse(fs.readFileSync(path.resolve(__dirname, '..', '..', 'tests', 'http', 'cases.json'), 'utf8'));
const START_US = 1_700_000_000_000_000;
const ms = (seconds) => (seconds === null ? null : seconds * 1000);

/** A header lookup over the case's fields, without regard to case. */
const lookup = (headers) => (name) => Object.entries(headers).find(([k]) => k.toLowerCase() === name)?.[1];

for (const c of TABLE.client_key) {
  test(`client key: ${c.name}`, async () => {
    const limiter = Backend.memory().window('keys', 5, 'minute');
    const options = { limiter, trustedProxies: c.trusted_proxies };
    if ('proxy_header' in c) options.proxyHeader = c.proxy_header;
    const core = buildCore(options);
    assert.equal(await core.key({}, c.peer, lookup(c.headers)), c.key);
  });
}

test('client keys: one middleware per configuration answers every case twice (its memo of keys)', async () => {
  const groups = new Map();
  for (const c of TABLE.client_key) {
    const config = JSON.stringify([c.trusted_proxies ?? null, c.proxy_header ?? null]);
    if (!groups.has(config)) groups.set(config, []);
    groups.get(config).push(c);
  }
  for (const cases of groups.values()) {
    const options = { limiter: Backend.memory().window('keys', 5, 'minute'), trustedProxies: cases[0].trusted_proxies };
    if ('proxy_header' in cases[0]) options.proxyHeader = cases[0].proxy_header;
    const core = buildCore(options);
    for (const round of [1, 2]) {
      for (const c of cases) assert.equal(await core.key({}, c.peer, lookup(c.headers)), c.key, `${c.name} (round ${round})`);
    }
  }
});

for (const c of TABLE.fields) {
  test(`fields: ${c.name}`, () => {
    const secret = c.partition_key_secret === undefined ? null : Buffer.from(c.partition_key_secret, 'utf8');
    const policies = c.reports.map((r) => ({ name: r.name, windowMs: ms(r.window) }));
    const rules = new NativeHttpRules(c.headers, [], 'X-Forwarded-For', secret, policies);
    const reports = c.reports.map((r, index) => ({
      index,
      decision: {
        allowed: r.allowed,
        limit: r.limit,
        remaining: r.remaining,
        resetAfterMs: ms(r.reset_after),
        retryAfterMs: ms(r.retry_after),
        limits: r.limits?.map((l) => ({
          windowMs: ms(l.window),
          limit: l.limit,
          remaining: l.remaining,
          resetAfterMs: ms(l.reset_after),
          retryAfterMs: ms(l.retry_after),
        })),
      },
    }));
    assert.deepEqual(rateLimitFields(rules, reports, c.key), c.fields);
  });
}

for (const c of TABLE.count) {
  test(`count: ${c.name}`, async () => {
    const limiter = Backend.memory({ clock: new ManualClock(START_US) }).limiter('count', c.limiter);
    const core = buildCore({ limiter, count: c.count, cost: c.cost });
    const outcome = await core.decide({}, '203.0.113.7', () => undefined);
    assert.equal(outcome.refused, false);
    await outcome.complete(c.status);
    assert.equal(limiter.peekSync('203.0.113.7').remaining, c.remaining);
  });
}

for (const c of TABLE.limiters) {
  test(`limiter facts: ${JSON.stringify(c.limiter)}`, () => {
    const limiter = Backend.memory().limiter('facts', c.limiter);
    assert.deepEqual([limiter.capacity, limiter.refundable, limiter.windowMs], [c.capacity, c.refundable, ms(c.window)]);
  });
}
