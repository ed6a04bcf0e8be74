'use strict';
// Upstream feedback through Node: `pause`, `observe` (plain objects, `Headers`, `Map`s, pairs,
// fetch `Response`s) and `observeResponse`, on memory, Redis and a Redis Cluster, judged by a
// ManualClock (never by sleeping).

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend, ManualClock } = require('..');
const { RedisServer, RedisCluster } = require('./support/redis.js');

const START_US = 1_700_000_000_000_000; // a whole second
const options = { deadlineMs: 5000, connectTimeoutMs: 5000 };
let prefixes = 0;
const prefix = () => `node${process.pid}x${prefixes++}`;

async function isPending(promise) {
  const marker = Symbol('pending');
  const first = await Promise.race([promise, new Promise((resolve) => setTimeout(resolve, 30, marker))]);
  return first === marker;
}

/** What every backend must do, given a factory of backends on one manual clock. */
async function pauseSemantics(makeBackend) {
  const clock = new ManualClock(START_US);
  const limiter = makeBackend(clock).tokenBucket('api', 0.01, 5); // 12 s refill 0.12 tokens
  assert.equal((await limiter.check('k')).allowed, true);
  assert.equal(await limiter.pause('10s', 'k'), 10_000);
  for (let i = 0; i < 3; i++) {
    const d = await limiter.check('k');
    assert.equal(d.allowed, false);
    assert.equal(d.retryAfterMs, 10_000);
    assert.equal(d.remaining, 0);
  }
  assert.equal((await limiter.peek('k')).retryAfterMs, 10_000);
  assert.equal((await limiter.check('other')).allowed, true, 'other keys are not paused');
  clock.advance(4000);
  assert.equal(await limiter.pause('2500ms', 'k'), 6000, 'a shorter pause never shortens');
  assert.equal(await limiter.pause('8s', 'k'), 8000, 'a longer one extends');
  clock.advance(8000);
  const back = await limiter.check('k');
  assert.equal(back.allowed, true);
  assert.equal(back.remaining, 3, 'the paused refusals consumed nothing');

  // observe, with headers as every client gives them.
  const api = makeBackend(clock).tokenBucket('upstream', 100, 100);
  assert.equal(await api.observe(200, { 'retry-after': '30' }, 'a'), null);
  assert.equal(await api.observe(429, { 'retry-after': 'soon' }, 'a'), null);
  assert.equal((await api.check('a')).allowed, true);
  const now = clock.nowUs / 1000;
  const date = new Date(now + 20_000).toUTCString();
  const forms = [
    ['object', { 'Retry-After': '3' }, 3000],
    ['Headers', new Headers({ 'retry-after': date }), 20_000],
    ['Map', new Map([['RateLimit-Remaining', '0'], ['RateLimit-Reset', '7']]), 7000],
    ['pairs', [['X-RateLimit-Reset', String(Math.floor(now / 1000) + 45)]], 45_000],
    ['array values', { 'x-ratelimit-reset': ['60', '90'] }, 60_000],
    ['Response', new Response(null, { status: 429, headers: { 'Retry-After': '4' } }), 4000],
  ];
  for (const [key, headers, wait] of forms) {
    assert.equal(await api.observe(429, headers, key), wait, key);
    assert.equal((await api.check(key)).retryAfterMs, wait, key);
  }
  const response = new Response('slow down', { status: 503, headers: { 'Retry-After': '5' } });
  assert.equal(await api.observeResponse(response, 'fetched'), 5000);
  assert.equal((await api.check('fetched')).retryAfterMs, 5000);
  assert.equal(await api.observeResponse(new Response('ok'), 'fine'), null);

  // acquire waits out the pause, by the manual clock.
  const waiter = makeBackend(clock).tokenBucket('waiter', 100, 100);
  await waiter.pause('5s');
  await assert.rejects(waiter.acquire(null, { waitTimeoutMs: 1000 }), (e) => e.code === 'ERR_OVER_LIMIT' && e.retryAfterMs === 5000);
  const waiting = waiter.acquire(null, { waitTimeoutMs: 10_000 });
  assert.equal(await isPending(waiting), true);
  clock.advanceUs(5_000_000 - 1);
  assert.equal(await isPending(waiting), true, 'not one microsecond early');
  clock.advanceUs(1);
  assert.equal((await waiting).allowed, true);
}

/** A pause lasts at most `maxPauseMs` (one hour by default), counted; `resume` ends it. */
async function boundedAndResumable(makeBackend) {
  const clock = new ManualClock(START_US);
  const backend = makeBackend(clock);
  const limiter = backend.tokenBucket('bounded', 100, 100);
  const HOUR = 3_600_000;
  assert.equal(limiter.maxPauseMs, HOUR);
  const hostile = { 'Retry-After': '2200000000' };
  assert.equal(await limiter.observe(429, hostile, 'k'), HOUR, '70 years asked, one hour written');
  assert.equal(await limiter.observe(429, new Headers({ 'X-RateLimit-Reset': '4000000000' }), 'k'), HOUR);
  assert.equal((await limiter.check('k')).retryAfterMs, HOUR);
  assert.equal(limiter.metrics().pausesClamped, 2);
  // Another limiter object of the fleet ends the pause.
  const other = backend.tokenBucket('bounded', 100, 100);
  assert.equal(await other.resume('k'), true);
  assert.equal((await limiter.check('k')).allowed, true);
  assert.equal(await other.resume('k'), false, 'nothing left to resume');
  // Per limiter and per call.
  const short = limiter.withMaxPause('10s');
  assert.equal(short.maxPauseMs, 10_000);
  assert.equal(await short.observe(429, hostile, 'a'), 10_000);
  assert.equal(await short.observe(429, hostile, 'b', { maxPauseMs: 5000 }), 5000);
  const response = new Response(null, { status: 429, headers: hostile });
  assert.equal(await limiter.observeResponse(response, 'c', { maxPauseMs: 2000 }), 2000);
  assert.equal(await limiter.pause('2h', 'd'), HOUR, 'pause is bounded too');
  assert.equal(limiter.metrics().pausesClamped, 6, 'copies share their metrics');
  clock.advance(10_000);
  assert.equal((await short.check('a')).allowed, true);
  for (const bad of [0, -1, NaN, Infinity, '10', '0s', '-1s', 10_000]) {
    assert.throws(() => limiter.withMaxPause(bad), { code: 'ERR_INVALID_ARGUMENT', parameter: 'maxPause' });
  }
  for (const bad of [0, -1, NaN, Infinity, '10']) {
    await assert.rejects(limiter.observe(429, hostile, 'e', { maxPauseMs: bad }), {
      code: 'ERR_INVALID_ARGUMENT',
      parameter: 'maxPauseMs',
    });
  }
  await assert.rejects(limiter.observe(429, hostile, 'e', { maxPause: 1 }), { code: 'ERR_INVALID_ARGUMENT' });
  assert.equal((await limiter.check('e')).allowed, true, 'nothing was paused');
}

test('max_pause and resume on memory', async () => {
  await boundedAndResumable((clock) => Backend.memory({ clock }));
});

test('max_pause and resume on Redis', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  await boundedAndResumable((clock) => Backend.redis(server.url, { ...options, prefix: prefix(), clock }));
});

test('pause and observe on memory', async () => {
  await pauseSemantics((clock) => Backend.memory({ clock }));
});

test('pause and observe on Redis', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  await pauseSemantics((clock) => Backend.redis(server.url, { ...options, prefix: prefix(), clock }));
});

test('pause and observe on a Redis Cluster', async (t) => {
  const cluster = await RedisCluster.start();
  t.after(() => cluster.destroy());
  await pauseSemantics((clock) => Backend.cluster(cluster.seeds, { ...options, prefix: prefix(), clock }));
});

test('bad arguments reject naming them, before anything is written', async () => {
  const limiter = Backend.memory().tokenBucket('api', 100, 100);
  for (const bad of [0, -1, NaN, Infinity, '3', '0s', '-1s', 3000, null, undefined]) {
    await assert.rejects(limiter.pause(bad, 'k'), (e) => e.code === 'ERR_INVALID_ARGUMENT' && e.parameter === 'duration', String(bad));
  }
  for (const [status, headers, parameter] of [
    [99, {}, 'status'],
    [1000, {}, 'status'],
    [429.5, {}, 'status'],
    ['429', {}, 'status'],
    [429, 'Retry-After: 3', 'headers'],
    [429, null, 'headers'],
    [429, [['Retry-After']], 'headers'],
    [429, { 'Retry-After': 3 }, 'headers'],
  ]) {
    await assert.rejects(limiter.observe(status, headers, 'k'), (e) => e.code === 'ERR_INVALID_ARGUMENT' && e.parameter === parameter, `${status} ${JSON.stringify(headers)}`);
  }
  await assert.rejects(limiter.observeResponse({ statusCode: 429 }), (e) => e.parameter === 'response');
  assert.equal((await limiter.check('k')).allowed, true, 'nothing was paused');
});
