'use strict';
// The Node API on the memory backend: every call style, leases, waits (driven by a
// ManualClock, never by sleeping), AbortSignal, withinLimit, metrics, shedders, HTTP helpers.

const test = require('node:test');
const assert = require('node:assert/strict');
const { getEventListeners } = require('node:events');
const http = require('node:http');
const rk = require('..');

const { Backend, Limiter, ManualClock, FleetShedder, UtilizationShedder, SKIPPED } = rk;
const START_US = 1_700_000_000_000_000;

/** Whether `promise` is still pending after the event loop has turned. */
async function isPending(promise) {
  const marker = Symbol('pending');
  const winner = await Promise.race([promise.then(() => 'settled', () => 'settled'), new Promise((r) => setImmediate(() => r(marker)))]);
  return winner === marker;
}

test('check, checkSync, peek and reset on a token bucket', async () => {
  const clock = new ManualClock(START_US);
  const limiter = Backend.memory({ clock }).tokenBucket('api', 10, 5);
  assert.equal(limiter.name, 'api');
  assert.equal(limiter.kind, 'token_bucket');
  const first = await limiter.check('user-1');
  const { settle, ...plain } = first;
  assert.deepEqual(plain, { allowed: true, limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 100, decidedAtUs: START_US, shadowRefused: false });
  // An admitted call carries what `settle` needs: the key, the cost, the instant, an id.
  assert.equal(settle.key, 'user-1');
  assert.equal(settle.cost, 1);
  assert.equal(settle.chargedAtUs, START_US);
  assert.ok(Number.isSafeInteger(settle.id) && settle.id > 0);
  assert.equal(limiter.checkSync('user-1', 4).remaining, 0);
  const refused = await limiter.check('user-1');
  assert.equal(refused.allowed, false);
  assert.equal(refused.retryAfterMs, 100);
  assert.equal(refused.resetAfterMs, 500);
  assert.equal((await limiter.peek('user-1')).remaining, 0, 'a refused call consumes nothing');
  assert.equal((await limiter.check('user-2')).remaining, 4, 'keys do not share state');
  clock.advance(100);
  assert.deepEqual(limiter.peekSync('user-1'), { allowed: true, limit: 5, remaining: 1, retryAfterMs: 0, resetAfterMs: 400, decidedAtUs: START_US + 100_000, settle: undefined, shadowRefused: false });
  assert.equal(await limiter.reset('user-1'), undefined);
  assert.equal((await limiter.peek('user-1')).remaining, 5);
  assert.equal((await limiter.check(null, 0)).remaining, 5, 'cost 0 is always admitted and records nothing');
});

test('every limiter kind is built and checked', async () => {
  const backend = new Backend();
  const limiters = [
    backend.concurrent('c', 2),
    backend.bucket('b', 2, 'second'),
    backend.bucket('b2', 2, '1s'),
    backend.window('w', 2, 'minute'),
    backend.windows('ws', [{ limit: 25, intervalMs: 5000 }, { limit: 300, intervalMs: 60000 }]),
    backend.slidingWindow('s', [{ durationMs: 1000, limit: 2, precisionMs: 100 }, ['1m', 10]]),
    backend.tokenBucket('t', 5, 2),
    backend.leaky('l', 2, '1s'),
    backend.points('p', 100, '1s'),
    backend.unlimited(),
    backend.unlimited('named'),
    Limiter.unlimited(),
  ];
  for (const limiter of limiters) {
    const d = await limiter.check('k');
    assert.equal(d.allowed, true, limiter.kind);
    assert.equal(Boolean(d.lease), limiter.kind === 'concurrent', `${limiter.kind} lease`);
  }
  const multi = await limiters[4].check('k2');
  assert.deepEqual(multi.limits.map((l) => [l.windowMs, l.limit, l.remaining]), [[5000, 25, 24], [60000, 300, 299]]);
  const sliding = await limiters[5].check('k2');
  assert.equal(sliding.limits.length, 2);
  const unlimited = await Limiter.unlimited().check('k', 2 ** 53);
  assert.equal(unlimited.limit, 2 ** 53);
  assert.equal(unlimited.remaining, 2 ** 53, 'exact in a JavaScript number');
  assert.equal(unlimited.decidedAtUs, 0);
});

test('leased: the token bucket on memory, its options checked, close() a no-op there', async () => {
  const clock = new ManualClock(START_US);
  const backend = Backend.memory({ clock });
  const limiter = backend.leased('sends', 2, 3, { chunk: 2, leaseTtlMs: 500 });
  assert.equal(limiter.kind, 'leased');
  assert.deepEqual(limiter.spec, { kind: 'leased', rate: 2, capacity: 3, chunk: 2, lease_ttl: 0.5 });
  assert.equal((await limiter.check()).remaining, 2);
  assert.equal(limiter.checkSync(null, 2).remaining, 0);
  const refused = await limiter.check();
  assert.equal(refused.allowed, false);
  assert.equal(refused.retryAfterMs, 500);
  await limiter.close();
  clock.advance(500);
  assert.equal((await limiter.check()).allowed, true);
  assert.throws(() => backend.leased('x', 2, 3, { chunk: 4 }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'chunk' });
  assert.throws(() => backend.leased('x', 2, 3, { chunk: 1.5 }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'chunk' });
  assert.throws(() => backend.leased('x', 2, 3, { leaseTtlMs: -1 }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'leaseTtlMs' });
  assert.throws(() => backend.leased('x', 2, 3, { chunks: 1 }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'chunks' });
});

test('acquire waits exactly until the manual clock allows it', async () => {
  const clock = new ManualClock(START_US);
  const limiter = Backend.memory({ clock }).tokenBucket('wait', 10, 1); // one token per 100 ms
  await limiter.check('k');
  const waiting = limiter.acquire('k', { waitTimeoutMs: 1000 });
  assert.equal(await isPending(waiting), true);
  clock.advance(99.999);
  assert.equal(await isPending(waiting), true, 'not one microsecond early');
  clock.advanceUs(1);
  const d = await waiting;
  assert.equal(d.allowed, true);
  assert.equal(d.decidedAtUs, START_US + 100_000);
  // A wait that cannot succeed in time fails at once, with the exact retry time.
  await assert.rejects(limiter.acquire('k', { waitTimeoutMs: 50 }), (e) => e.code === 'ERR_OVER_LIMIT' && e.retryAfterMs === 100);
  // The limiter's default wait, changed with withWaitTimeout (0: never wait).
  const noWait = limiter.withWaitTimeout(0);
  assert.equal(noWait.waitTimeoutMs, 0);
  assert.equal(limiter.waitTimeoutMs, 5000);
  await assert.rejects(noWait.acquire('k'), { code: 'ERR_OVER_LIMIT' });
});

test('concurrent leases: release, lease lost, extend, fencing tokens, waiters woken by a release', async () => {
  const backend = Backend.memory();
  const mutex = backend.concurrent('mutex', 1, { lockTimeoutMs: 30000, waitTimeoutMs: 5000 });
  const a = await mutex.acquire('doc-1');
  assert.match(a.lease.id, /^[0-9a-f]{32}$/);
  assert.equal(a.lease.key, 'doc-1');
  assert.equal((await mutex.check('doc-1')).allowed, false);
  await mutex.extend(a.lease);
  const waiter = mutex.acquire('doc-1');
  assert.equal(await isPending(waiter), true);
  await mutex.release(a.lease);
  const b = await waiter; // woken by the release, not by polling
  assert.ok(b.lease.fencingToken > a.lease.fencingToken);
  await assert.rejects(mutex.release(a.lease), { code: 'ERR_LEASE_LOST' });
  await mutex.release(b.lease);
  const m = mutex.metrics();
  assert.equal(m.held, 2);
  assert.equal(m.immediate, 1);
  assert.equal(m.waited, 1);
  assert.ok(m.waitTimeMs > 0);
  assert.deepEqual(await mutex.fleetMetrics(), mutex.metrics());
  // A lease outliving lock_timeout is reclaimed by a caller that needs its slot.
  const clock = new ManualClock(START_US);
  const short = Backend.memory({ clock }).concurrent('short', 1, { lockTimeoutMs: 1000 });
  const old = await short.check();
  clock.advance(1000);
  const fresh = await short.check();
  assert.equal(fresh.allowed, true);
  await assert.rejects(short.release(old.lease), { code: 'ERR_LEASE_LOST' });
  assert.equal(short.metrics().reclaimed, 1);
});

test('an AbortSignal aborts a wait, and its listener is removed', async () => {
  const mutex = Backend.memory().concurrent('abort', 1);
  const held = await mutex.acquire();
  const controller = new AbortController();
  const waiting = mutex.acquire(undefined, { signal: controller.signal, waitTimeoutMs: 60000 });
  assert.equal(await isPending(waiting), true);
  assert.equal(getEventListeners(controller.signal, 'abort').length, 1);
  controller.abort();
  await assert.rejects(waiting, (e) => e.name === 'AbortError' && e.code === 'ABORT_ERR');
  assert.equal(getEventListeners(controller.signal, 'abort').length, 0);
  await assert.rejects(mutex.acquire(undefined, { signal: AbortSignal.abort() }), { code: 'ABORT_ERR' });
  await assert.rejects(mutex.acquire(undefined, { signal: {} }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'signal' });
  // A signal that never fires leaves no listener behind either.
  const idle = new AbortController();
  await mutex.release(held.lease);
  const got = await mutex.acquire(undefined, { signal: idle.signal });
  assert.equal(getEventListeners(idle.signal, 'abort').length, 0);
  await mutex.release(got.lease);
});

test('withinLimit: raise, ignore, release on success and on error, points refunds', async () => {
  const backend = Backend.memory();
  const pool = backend.concurrent('pool', 1, { waitTimeoutMs: 0 });
  assert.equal(await pool.withinLimit(async ({ decision }) => decision.allowed), true);
  assert.equal((await pool.peek()).remaining, 1, 'the lease was released');
  await assert.rejects(pool.withinLimit(() => { throw new Error('boom'); }), /boom/);
  assert.equal((await pool.peek()).remaining, 1, 'released after an error too');
  const held = await pool.acquire();
  await assert.rejects(pool.withinLimit(() => 1), { code: 'ERR_OVER_LIMIT' });
  assert.equal(await pool.withinLimit(() => 1, { policy: 'ignore' }), SKIPPED);
  await pool.release(held.lease);
  await assert.rejects(pool.withinLimit(() => 1, { policy: 'sometimes' }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'policy' });

  const clock = new ManualClock(START_US);
  const graphql = Backend.memory({ clock }).points('shopify', 1000, '20s');
  const after = await graphql.withinLimit(async (permit) => {
    assert.equal(permit.decision.remaining, 800);
    return permit.pointsUsed(50); // refund 150
  }, { key: 'shop-7', cost: 200 });
  assert.equal(after.remaining, 950);
  assert.equal((await graphql.pointsUsed('shop-7', 50, 100)).remaining, 900);
  await assert.rejects(backend.bucket('b', 1, '1s').pointsUsed(null, 1, 1), { code: 'ERR_INVALID_ARGUMENT' });
});

test('fleet shedder: critical traffic bypasses, the rest sheds with ERR_SHED', async () => {
  const shedder = new FleetShedder(Backend.memory(), 'fleet', 1);
  const ticket = await shedder.enter(false);
  assert.match(ticket.id, /^[0-9a-f]{32}$/);
  await assert.rejects(shedder.enter(), { code: 'ERR_SHED' });
  assert.equal(await shedder.enter(true), null);
  await shedder.leave(null);
  await shedder.leave(ticket);
  assert.equal(await shedder.run(async () => 'ran'), 'ran');
  const again = await shedder.enter();
  await assert.rejects(shedder.run(() => 'no'), { code: 'ERR_SHED' });
  assert.equal(await shedder.run(() => 'critical', { critical: true }), 'critical');
  await shedder.leave(again);
});

test('utilization shedder follows the manual clock', () => {
  const clock = new ManualClock(START_US);
  const shedder = new UtilizationShedder({ clock });
  shedder.observe(1);
  for (let i = 0; i < 28; i++) {
    clock.advance(1000);
    shedder.observe(1);
  }
  assert.equal(shedder.shedding(), 0, 'nothing is shed for the first ~28 s');
  for (let i = 0; i < 200; i++) {
    clock.advance(1000);
    shedder.observe(1);
  }
  assert.equal(shedder.shedding(), 1);
  assert.equal(shedder.dropChance(3), 1);
  assert.equal(shedder.dropChance(0), 0);
  shedder.check(0);
  assert.throws(() => shedder.check(3), { code: 'ERR_SHED' });
  assert.throws(() => shedder.observe(1.5), { code: 'ERR_INVALID_ARGUMENT', parameter: 'utilization' });
  assert.throws(() => new UtilizationShedder({ beforeSheddingMs: -1 }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'beforeSheddingMs' });
});

test('backend statistics and memory keys', async () => {
  const backend = Backend.memory({ maxKeys: 2 });
  assert.deepEqual(backend.stats(), { failedOpen: 0, fellBack: 0, failed: 0, rejected: 0, configMismatches: 0 });
  const limiter = backend.bucket('b', 1, '1m');
  await limiter.check('a');
  await limiter.check('b');
  assert.equal(backend.memoryKeys, 2);
  await assert.rejects(limiter.check('c'), { code: 'ERR_BACKEND_UNAVAILABLE' });
});

test('HTTP helpers round Retry-After up to whole seconds', async () => {
  const refused = { allowed: false, limit: 10, remaining: 0, retryAfterMs: 1000.001, resetAfterMs: 59000, decidedAtUs: 1 };
  // Issue 46: draft-11 by default, as the HTTP middleware writes them (it was draft-6).
  assert.deepEqual(rk.rateLimitHeaders(refused), {
    'RateLimit-Policy': '"default";q=10',
    RateLimit: '"default";r=0;t=59',
    'Retry-After': '2',
  });
  assert.deepEqual(rk.rateLimitHeaders(refused, { policy: 'api "v1"' }).RateLimit, '"api \\"v1\\"";r=0;t=59');
  assert.deepEqual(rk.rateLimitHeaders(refused, { form: 'draft-6' }), {
    'RateLimit-Limit': '10',
    'RateLimit-Remaining': '0',
    'RateLimit-Reset': '59',
    'Retry-After': '2',
  });
  assert.deepEqual(rk.rateLimitHeaders({ ...refused, allowed: true }, { form: 'legacy' }), {
    'X-RateLimit-Limit': '10',
    'X-RateLimit-Remaining': '0',
    'X-RateLimit-Reset': '59',
  });
  assert.throws(() => rk.rateLimitHeaders(refused, { form: 'draft-99' }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'form' });
  assert.equal(rk.ceilSeconds(999), 1);
  assert.equal(rk.ceilSeconds(1000), 1);
  assert.equal(rk.ceilSeconds(0.001), 1);
  assert.equal(rk.ceilSeconds(0), 0);
  assert.equal(rk.httpStatus(refused), 429);
  assert.equal(rk.httpStatus({ ...refused, allowed: true }), undefined);
  const limiter = Backend.memory().tokenBucket('h', 1, 1).withWaitTimeout(0);
  await limiter.check();
  const error = await limiter.acquire().catch((e) => e);
  assert.equal(rk.httpStatus(error), 429);
  assert.deepEqual(rk.retryAfterHeaders(error), { 'Retry-After': '1' });
  const err = new Error('x');
  err.code = 'ERR_SHED';
  assert.equal(rk.httpStatus(err), 503);
});

test('ratekeeper/express on a bare node:http server serves 429 with the draft-6 headers', async (t) => {
  const { rateLimit } = require('ratekeeper/express');
  const limiter = Backend.memory().tokenBucket('http', 1, 2);
  const middleware = rateLimit({ limiter, keyGenerator: () => 'client', standardHeaders: 'draft-6' });
  const server = http.createServer((req, res) => middleware(req, res, () => res.end('ok')));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  const url = `http://127.0.0.1:${server.address().port}/`;
  const statuses = [];
  let last;
  for (let i = 0; i < 3; i++) {
    last = await fetch(url);
    statuses.push(last.status);
    await last.text();
  }
  assert.deepEqual(statuses, [200, 200, 429]);
  assert.equal(last.headers.get('retry-after'), '1');
  assert.equal(last.headers.get('ratelimit-limit'), '2');
  assert.equal(last.headers.get('ratelimit-remaining'), '0');
});

test('ESM and CommonJS export the same API', async () => {
  const esm = await import('../index.mjs');
  for (const name of Object.keys(rk)) assert.equal(esm[name], rk[name], name);
  assert.equal(esm.default, rk);
  assert.equal(typeof rk.coreVersion(), 'string');
  assert.deepEqual(Object.keys(rk).sort(), Object.keys(esm).filter((k) => k !== 'default').sort());
});

test('isRatekeeperError and codes', async () => {
  const error = await Backend.memory().bucket('e', 1, '1s').check('k', 2).catch((e) => e);
  assert.ok(error instanceof Error);
  assert.equal(error.code, rk.codes.INVALID_ARGUMENT);
  assert.equal(rk.isRatekeeperError(error), true);
  assert.equal(rk.isRatekeeperError(new Error('other')), false);
});

test('specs as data: build from an object or JSON text, read back, bad fields named by path', () => {
  const backend = rk.Backend.memory();
  const named = [
    backend.tokenBucket('tb', 10, 20),
    backend.window('w', 100, '1m'),
    backend.slidingWindow('sw', [['1m', 100, '1s'], ['1s', 10, '100ms']]),
    backend.concurrent('c', 10, { lockTimeoutMs: 30_000, waitTimeoutMs: 2_000 }),
    backend.leaky('l', 4, '500ms'),
    backend.calendar('cal', 1000, 'month', { tz: 'Europe/Berlin', anchor: 15 }),
  ];
  for (const limiter of named) {
    const fromObject = backend.limiter(limiter.name, limiter.spec);
    const fromText = backend.limiter(limiter.name, limiter.specJson);
    assert.deepEqual(fromObject.spec, limiter.spec);
    assert.equal(fromText.specJson, limiter.specJson);
  }
  assert.deepEqual(named[3].spec, { kind: 'concurrent', limit: 10, lock_timeout: 30, wait_timeout: 2 });
  assert.deepEqual(named[2].spec, { kind: 'sliding_window', limits: [[60, 100, 1], [1, 10, 0.1]] });
  assert.equal(backend.limiter('c2', named[3].spec).waitTimeoutMs, 2000);
  const a = backend.tokenBucket('shared', 1, 2);
  const b = backend.limiter('shared', { kind: 'token_bucket', rate: 1, capacity: 2 });
  assert.equal(a.checkSync().remaining, 1);
  assert.equal(b.checkSync().remaining, 0);
  for (const [spec, parameter] of [
    [{ kind: 'windows', windows: [[25, 5], [0, 60]] }, 'windows[1][0]'],
    [{ kind: 'concurrent', limit: 1, lock_timeout: 0 }, 'lock_timeout'],
    [{ kind: 'token_bucket', rate: 1, capacity: 2, burst: 3 }, 'burst'],
    ['{"kind": ', 'spec'],
    [42, 'spec'],
  ]) {
    assert.throws(() => backend.limiter('bad', spec), (e) => e.code === 'ERR_INVALID_ARGUMENT' && e.parameter === parameter,
      JSON.stringify(spec));
  }
});
