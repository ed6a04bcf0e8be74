'use strict';
// Shadow mode through Node: the `shadow` option (constructor option, spec field, `withShadow`),
// decisions marked `shadowRefused`, acquire that never waits, withinLimit that runs its
// function, metrics, an override switching it in another process (a second backend on one
// real Redis), and the HTTP middleware's one rule. The decisions' figures are in
// tests/vectors/shadow.json.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend } = require('..');
const { buildCore } = require('../http/core.js');
const { RedisServer, waitUntil } = require('./support/redis.js');

const HOUR_MS = 3_600_000;

test('the shadow option: a constructor option, a spec field, withShadow', () => {
  const backend = Backend.memory();
  const byOption = backend.leaky('a', 1, '1h', { shadow: true });
  assert.equal(byOption.shadow, true);
  assert.deepEqual(byOption.spec, { kind: 'leaky', size: 1, drain: 3600, shadow: true });
  const bySpec = backend.limiter('b', { kind: 'leaky', size: 1, drain: 3600, shadow: true });
  assert.equal(bySpec.shadow, true);
  const enforcing = bySpec.withShadow(false);
  assert.equal(enforcing.shadow, false);
  assert.equal('shadow' in enforcing.spec, false, 'printed only when true');
  assert.throws(() => bySpec.withShadow('yes'), (e) => e.code === 'ERR_INVALID_ARGUMENT' && e.parameter === 'shadow');
  assert.throws(
    () => backend.leaky('c', 1, '1h', { shadow: 1 }),
    (e) => e.code === 'ERR_INVALID_ARGUMENT' && e.parameter === 'shadow',
  );
});

test('a shadow limiter admits what it would refuse, never waits, runs the function', async () => {
  const backend = Backend.memory();
  const limiter = backend.leaky('jobs', 1, '1h').withShadow(true);
  const first = await limiter.check('k');
  assert.deepEqual([first.allowed, first.shadowRefused], [true, false]);
  const started = Date.now();
  const second = await limiter.acquire('k', { waitTimeoutMs: HOUR_MS });
  assert.ok(Date.now() - started < HOUR_MS / 2, 'acquire never waits in shadow mode');
  assert.deepEqual([second.allowed, second.shadowRefused], [true, true]);
  assert.ok(second.retryAfterMs > 0 && second.retryAfterMs <= HOUR_MS, 'what enforcement would have said');
  const ran = await limiter.withinLimit((permit) => permit.decision.shadowRefused, { key: 'k' });
  assert.equal(ran, true);
  const m = limiter.metrics();
  assert.deepEqual([m.allowed, m.refused, m.shadowRefused], [1, 0, 2]);
  assert.equal((await limiter.withShadow(false).check('k')).allowed, false, 'the state is what enforcement would have');

  const slots = backend.concurrent('slots', 1, { shadow: true });
  const held = await slots.check('k');
  const extra = await slots.check('k');
  assert.deepEqual([extra.allowed, extra.shadowRefused, extra.lease], [true, true, undefined]);
  await slots.release(held.lease);
});

test('redis: an override switches shadow mode in another process', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const options = { deadlineMs: 5000, connectTimeoutMs: 5000, prefix: 'nodeshadow' };
  const ops = Backend.redis(server.url, options);
  const worker = Backend.redis(server.url, options);
  const api = worker.leaky('api', 1, '1h');
  assert.equal((await api.check('k')).allowed, true);
  assert.equal((await api.check('k')).allowed, false);
  await ops.setLimit('api', { kind: 'leaky', size: 1, drain: 3600, shadow: true }, 'k');
  await waitUntil('the worker applies the override', 20000, async () => (await api.check('k')).shadowRefused);
  assert.equal((await api.check('other')).shadowRefused, false, 'other keys still enforce');
  await worker.flush();
  const [fleet] = await ops.metrics({ fleet: true });
  assert.ok(fleet.metrics.shadowRefused >= 1, JSON.stringify(fleet.metrics));
  const text = await ops.prometheus({ fleet: true });
  const line = `ratekeeper_checks_total{limiter="api",kind="leaky",outcome="shadow_refused"} ${fleet.metrics.shadowRefused}`;
  assert.ok(text.split('\n').includes(line), text);
});

const request = {};
const peer = '192.0.2.1';
const header = () => undefined;

test('the middleware counts a shadow limiter\'s refusals by the same rule as its own shadow option', async () => {
  const backend = Backend.memory();
  const core = buildCore({ limiter: backend.window('new', 1, '1h', { shadow: true }) });
  for (let i = 0; i < 3; i++) assert.equal((await core.decide(request, peer, header)).refused, false);
  assert.equal(core.shadowRefused, 2);
  const own = buildCore({ limiter: backend.window('old', 1, '1h'), shadow: true });
  for (let i = 0; i < 2; i++) assert.equal((await own.decide(request, peer, header)).refused, false);
  assert.equal(own.shadowRefused, 1);
});

test('the middleware never refunds what a shadow refusal did not take', async () => {
  const backend = Backend.memory();
  const bucket = backend.tokenBucket('login', 0.0001, 2, { shadow: true });
  const core = buildCore({ limiter: bucket, count: 'successes' });
  for (let i = 0; i < 2; i++) await (await core.decide(request, peer, header)).complete(200);
  const refused = await core.decide(request, peer, header);
  await refused.complete(401); // not counted: a refund, but this call took nothing
  assert.equal((await bucket.peek('192.0.2.1')).remaining, 0, 'the two admitted calls are still charged');
});
