// backend.checkAll / acquireAll (several limits, all or nothing) through Node, on memory, a real
// redis-server and a real 3-master Redis Cluster: a refused combination consumes nothing and
// holds no lease, release() gives back the concurrent parts' leases, acquireAll waits or gives
// up with the combination's retry, a Cluster refuses parts across slots, bad parts are typed
// errors naming the part before anything is written.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend, codes } = require('../index.js');
const { RedisServer, RedisCluster } = require('./support/redis.js');

const HOUR = 3600;

function colocated(backend, name, spec) {
  return backend.limiter(name, { ...spec, colocate: 'tenant' });
}

async function allOrNothing(backend) {
  const rate = colocated(backend, 'node-rate', { kind: 'token_bucket', rate: 5 / HOUR, capacity: 5 });
  const quota = colocated(backend, 'node-quota', { kind: 'bucket', limit: 3, interval: HOUR });
  const slots = colocated(backend, 'node-slots', { kind: 'concurrent', limit: 2, lock_timeout: HOUR });
  const parts = [
    { limiter: rate, key: 't1:u', cost: 2 },
    { limiter: quota, key: 't1', cost: 2 },
    { limiter: slots, key: 't1' },
  ];

  const admitted = await backend.checkAll(parts);
  assert.equal(admitted.allowed, true);
  assert.equal(admitted.retryAfterMs, 0);
  assert.deepEqual(admitted.parts.map((p) => p.decision.remaining), [3, 1, 1]);
  assert.deepEqual(admitted.parts.map((p) => [p.key, p.cost]), [['t1:u', 2], ['t1', 2], ['t1', 1]]);
  assert.equal(admitted.parts[2].limiter, slots);
  assert.ok(admitted.parts[2].decision.lease, 'the concurrent part holds a lease');
  assert.equal(admitted.parts[0].decision.lease, undefined);

  const refused = await backend.checkAll(parts);
  assert.equal(refused.allowed, false);
  assert.deepEqual(refused.parts.map((p) => p.decision.allowed), [true, false, true]);
  assert.ok(refused.retryAfterMs > 0);
  assert.equal(refused.retryAfterMs, refused.parts[1].decision.retryAfterMs);
  assert.ok(refused.parts.every((p) => p.decision.lease === undefined), 'a refused combination holds no lease');
  assert.equal((await rate.peek('t1:u')).remaining, 3, 'nothing was consumed');
  assert.equal((await quota.peek('t1')).remaining, 1);
  assert.equal((await slots.peek('t1')).remaining, 1);

  await admitted.release();
  assert.equal((await slots.peek('t1')).remaining, 2, 'release() gave the lease back');
}

async function acquireAllGivesUp(backend) {
  const rate = colocated(backend, 'node-acq', { kind: 'token_bucket', rate: 1, capacity: 2 });
  const quota = colocated(backend, 'node-acq-quota', { kind: 'bucket', limit: 1, interval: HOUR });
  const parts = [
    { limiter: rate, key: 't9:a' },
    { limiter: quota, key: 't9' },
  ];
  assert.equal((await backend.acquireAll(parts, { waitTimeoutMs: 1000 })).allowed, true);
  await assert.rejects(backend.acquireAll(parts, { waitTimeoutMs: 1000 }), (e) => {
    assert.equal(e.code, codes.OVER_LIMIT);
    assert.ok(e.retryAfterMs > 1000 && e.retryAfterMs <= HOUR * 1000, String(e.retryAfterMs));
    return true;
  });
  assert.equal((await rate.peek('t9:a')).remaining, 1, 'the refused waits consumed nothing');
}

test('checkAll is all or nothing on memory', () => allOrNothing(Backend.memory()));
test('acquireAll gives up with the retry on memory', () => acquireAllGivesUp(Backend.memory()));

test('an admitted combination is settled part by part with each part\'s limiter', async () => {
  const backend = Backend.memory();
  const quota = backend.bucket('node-settle-quota', 10, 'hour');
  const combined = await backend.checkAll([{ limiter: quota, key: 'acme', cost: 5 }]);
  const [part] = combined.parts;
  assert.equal((await part.limiter.settle(part.decision, 2)).remaining, 8);
  assert.equal((await part.limiter.settle(JSON.parse(JSON.stringify(part.decision)), 2)).remaining, 8, 'once');
});

test('acquireAll waits for a release of a concurrent part, and an abort ends the wait', async () => {
  const backend = Backend.memory();
  const slots = backend.concurrent('node-wait', 1);
  const quota = backend.bucket('node-wait-quota', 10, 'hour');
  const parts = [{ limiter: slots, key: 'w' }, { limiter: quota, key: 'w' }];
  const first = await backend.checkAll(parts);
  assert.equal(first.allowed, true);
  const waiting = backend.acquireAll(parts, { waitTimeoutMs: 5000 });
  setTimeout(() => first.release(), 50);
  const second = await waiting;
  assert.equal(second.allowed, true);
  assert.equal((await quota.peek('w')).remaining, 8, 'each admitted combination consumed once');

  const controller = new AbortController();
  const aborted = backend.acquireAll(parts, { waitTimeoutMs: 5000, signal: controller.signal });
  setTimeout(() => controller.abort(), 50);
  await assert.rejects(aborted, (e) => e.name === 'AbortError');
  assert.equal((await quota.peek('w')).remaining, 8, 'the aborted wait consumed nothing');
  await second.release();
});

test('bad parts are typed errors naming the part, and write nothing', async () => {
  const backend = Backend.memory();
  const bucket = colocated(backend, 'node-bad', { kind: 'bucket', limit: 5, interval: 60 });
  const leased = backend.leased('node-leased', 1, 5);
  const other = Backend.memory().bucket('other', 5, '60ms');
  for (const [parts, parameter] of [
    [[], 'parts'],
    ['t1', 'parts'],
    [[{ limiter: bucket, key: 't1', cost: 1 }, { limiter: bucket, key: 't1', cost: 0 }], 'parts[1].cost'],
    [[{ limiter: bucket, key: 't1', cost: -1 }], 'parts[0].cost'],
    [[{ limiter: bucket, key: 't1', cost: 1.5 }], 'parts[0].cost'],
    [[{ limiter: bucket, key: 't1', cost: 6 }], 'parts[0].cost'],
    [[{ limiter: bucket, key: 't1', cost: '1' }], 'parts[0].cost'],
    [[{ limiter: bucket, key: 7 }], 'parts[0].key'],
    [[{ limiter: bucket, key: 'k'.repeat(2000) }], 'parts[0].key'],
    [[{ limiter: bucket, key: 't1\uD800' }], 'parts[0].key'],
    [[null], 'parts[0]'],
    [[{ limiter: 'not a limiter', key: 't1' }], 'parts[0].limiter'],
    [[{ limiter: bucket, key: 't1' }, { limiter: leased, key: 't1' }], 'parts[1]'],
    [[{ limiter: bucket, key: 't1' }, { limiter: other, key: 't1' }], 'parts[1]'],
  ]) {
    await assert.rejects(backend.checkAll(parts), (e) => {
      assert.equal(e.code, codes.INVALID_ARGUMENT, `${parameter}: ${e.message}`);
      assert.equal(e.parameter, parameter, e.message);
      return true;
    });
  }
  await assert.rejects(backend.acquireAll([{ limiter: bucket, key: 't1' }], { waitTimeoutMs: -1 }), (e) => {
    return e.code === codes.INVALID_ARGUMENT && e.parameter === 'waitTimeoutMs';
  });
  await assert.rejects(backend.acquireAll([{ limiter: bucket }], { signal: 'x' }), (e) => e.parameter === 'signal');
  assert.equal((await bucket.peek('t1')).remaining, 5);
});

test('checkAll and acquireAll on a real redis-server', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  await allOrNothing(Backend.redis(server.url, { prefix: 'node-check-all' }));
  await acquireAllGivesUp(Backend.redis(server.url, { prefix: 'node-acquire-all' }));
});

test('on a 3-master Cluster: co-located parts combine, parts across slots are refused', async (t) => {
  const cluster = await RedisCluster.start();
  t.after(() => cluster.destroy());
  const backend = Backend.cluster(cluster.seeds, { prefix: 'node-check-all' });
  await allOrNothing(backend);

  const a = backend.tokenBucket('node-plain-a', 1, 5);
  const b = backend.tokenBucket('node-plain-b', 1, 5);
  await assert.rejects(backend.checkAll([{ limiter: a, key: 'x' }, { limiter: b, key: 'x' }]), (e) => {
    assert.equal(e.code, codes.INVALID_ARGUMENT);
    assert.equal(e.parameter, 'parts');
    assert.match(e.message, /node-plain-a/);
    assert.match(e.message, /node-plain-b/);
    return true;
  });
  assert.equal((await a.peek('x')).remaining, 5, 'the cross-slot refusal wrote nothing');
  assert.equal((await b.peek('x')).remaining, 5);

  const quota = colocated(backend, 'node-tenant-quota', { kind: 'calendar', limit: 10, period: 'month', tz: 'UTC' });
  const rate = colocated(backend, 'node-tenant-rate', { kind: 'token_bucket', rate: 1, capacity: 5 });
  for (let tenant = 0; tenant < 8; tenant++) {
    const combined = await backend.checkAll([
      { limiter: rate, key: `tenant${tenant}:u` },
      { limiter: quota, key: `tenant${tenant}` },
    ]);
    assert.equal(combined.allowed, true, `tenant${tenant}`);
  }
});
