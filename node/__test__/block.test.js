'use strict';
// Blocking through Node: `block`, `unblock`, `blockForMs` / `withBlockFor` and `block_for` in a
// spec, on memory, Redis and a Redis Cluster, judged by a ManualClock. The exact figures are the
// shared vectors' (tests/vectors/block.json); these hold the Node surface.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend, ManualClock } = require('..');
const { RedisServer, RedisCluster } = require('./support/redis.js');

const START_US = 1_700_000_000_000_000; // a whole second
const options = { deadlineMs: 5000, connectTimeoutMs: 5000 };
let prefixes = 0;
const prefix = () => `node${process.pid}x${prefixes++}`;

/** What every backend must do, given a factory of backends on one manual clock. */
async function blockSemantics(makeBackend) {
  const clock = new ManualClock(START_US);
  const backend = makeBackend(clock);
  const limiter = backend.tokenBucket('api', 0.01, 5);
  assert.equal((await limiter.check('k')).allowed, true);
  assert.equal(await limiter.unblock('k'), false);
  assert.equal(await limiter.block('10s', 'k'), 10_000);
  for (let i = 0; i < 3; i++) {
    const d = await limiter.check('k');
    assert.equal(d.allowed, false);
    assert.equal(d.retryAfterMs, 10_000);
    assert.equal(d.remaining, 0);
  }
  assert.equal((await limiter.peek('k')).retryAfterMs, 10_000);
  assert.equal((await limiter.check('other')).allowed, true, 'other keys are not blocked');
  assert.equal(await limiter.resume('k'), false, 'a block is not a pause');
  assert.equal(limiter.metrics().blocked, 3);
  assert.equal(await limiter.block('2500ms', 'k'), 2500, 'a block by hand replaces the one in effect');
  assert.equal(await limiter.unblock('k'), true);
  const back = await limiter.check('k');
  assert.equal(back.allowed, true);
  assert.equal(back.remaining, 3, 'the blocked refusals consumed nothing');

  // block_for: as an option, and in a spec.
  const plain = backend.bucket('login', 1, '1m');
  assert.equal(plain.blockForMs, null);
  const strict = plain.withBlockFor('10m');
  assert.equal(strict.blockForMs, 600_000);
  assert.equal(strict.spec.block_for, 600);
  assert.equal(backend.limiter('login', { kind: 'bucket', limit: 1, interval: 60, block_for: 600 }).blockForMs, 600_000);
  assert.equal(strict.withBlockFor(null).blockForMs, null);
  assert.equal((await strict.check('u')).allowed, true);
  const refused = await strict.check('u');
  assert.equal(refused.allowed, false);
  assert.equal(refused.retryAfterMs, 600_000);
  clock.advance(120_000);
  assert.equal((await plain.check('u')).retryAfterMs, 480_000, 'the block is the key\'s');
  await strict.reset('u');
  assert.equal((await strict.check('u')).allowed, true, 'reset forgets the block');
}

test('block, unblock and block_for on memory', async () => {
  await blockSemantics((clock) => Backend.memory({ clock }));
});

test('block, unblock and block_for on Redis', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  await blockSemantics((clock) => Backend.redis(server.url, { ...options, prefix: prefix(), clock }));
});

test('block, unblock and block_for on a Redis Cluster', async (t) => {
  const cluster = await RedisCluster.start();
  t.after(() => cluster.destroy());
  await blockSemantics((clock) => Backend.cluster(cluster.seeds, { ...options, prefix: prefix(), clock }));
});

test('bad durations reject naming them, before anything is written', async () => {
  const limiter = Backend.memory().tokenBucket('api', 100, 100);
  for (const bad of [0, -1, NaN, Infinity, '10']) {
    await assert.rejects(limiter.block(bad, 'k'), { code: 'ERR_INVALID_ARGUMENT', parameter: 'duration' });
    assert.throws(() => limiter.withBlockFor(bad), { code: 'ERR_INVALID_ARGUMENT', parameter: 'blockFor' });
  }
  await assert.rejects(limiter.unblock('k'.repeat(1025)), { code: 'ERR_INVALID_ARGUMENT', parameter: 'key' });
  assert.equal((await limiter.check('k')).allowed, true, 'nothing was blocked');
});

test('the deny cache answers a remembered refusal in process, until reset', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const clock = new ManualClock(START_US);
  const backend = Backend.redis(server.url, { ...options, prefix: prefix(), clock });
  const plain = backend.tokenBucket('api', 1, 1);
  assert.equal(plain.denyCache, false);
  const cached = plain.withDenyCache(true);
  assert.equal(cached.denyCache, true);
  assert.equal((await cached.check('k')).allowed, true);
  assert.equal((await cached.check('k')).retryAfterMs, 1000);
  clock.advance(250);
  for (let i = 0; i < 20; i++) assert.equal((await cached.check('k')).retryAfterMs, 750);
  assert.equal(cached.metrics().refusedLocally, 20);
  await cached.reset('k');
  assert.equal((await cached.check('k')).allowed, true, 'reset forgets the remembered refusal');
  assert.throws(() => plain.withDenyCache('yes'), { code: 'ERR_INVALID_ARGUMENT', parameter: 'denyCache' });
});

test('the deny cache as a backend option: every limiter of a Redis or Cluster backend remembers refusals', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const cluster = await RedisCluster.start();
  t.after(() => cluster.destroy());
  const makers = [(o) => Backend.redis(server.url, o), (o) => Backend.cluster(cluster.seeds, o)];
  for (const make of makers) {
    const clock = new ManualClock(START_US);
    const backend = make({ ...options, prefix: prefix(), clock, denyCache: true, denyCacheMaxEntries: 1 });
    const api = backend.tokenBucket('api', 1, 1);
    assert.equal(api.denyCache, true, 'on for the backend: on for its limiters');
    assert.equal(backend.tokenBucket('own', 1, 1).withDenyCache(false).denyCache, false, "the limiter's own wins");
    for (const key of ['a', 'b']) {
      assert.equal((await api.check(key)).allowed, true);
      assert.equal((await api.check(key)).retryAfterMs, 1000);
    }
    clock.advance(250);
    // At most one entry: b's refusal took a's place, so a asks Redis again.
    for (let i = 0; i < 5; i++) assert.equal((await api.check('b')).retryAfterMs, 750);
    assert.equal(api.metrics().refusedLocally, 5);
    assert.equal((await api.check('a')).retryAfterMs, 750);
    assert.equal(api.metrics().refusedLocally, 5, 'a was no longer remembered');
    assert.equal((await api.check('a')).retryAfterMs, 750);
    assert.equal(api.metrics().refusedLocally, 6, 'a is remembered again');
    assert.equal(make({ ...options, prefix: prefix() }).tokenBucket('api', 1, 1).denyCache, false, 'off by default');
  }
  for (const [option, bad] of [['denyCache', 'yes'], ['denyCache', 1], ['denyCacheMaxEntries', 0], ['denyCacheMaxEntries', 1.5], ['denyCacheMaxEntries', -1], ['denyCacheMaxEntries', 'many']]) {
    for (const make of makers) {
      assert.throws(() => make({ ...options, [option]: bad }), { code: 'ERR_INVALID_ARGUMENT', parameter: option }, `${option}: ${bad}`);
    }
  }
});
