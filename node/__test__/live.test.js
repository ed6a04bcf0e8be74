'use strict';
// Live limits, the registry, metrics for every limiter and the Prometheus exposition through
// Node: on memory, and across two backends (two processes' worth of state) on a redis-server.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend } = require('..');
const { RedisServer, waitUntil } = require('./support/redis.js');

const bucket = (capacity) => ({ kind: 'token_bucket', rate: 0.001, capacity });

test('memory: setLimit applies at once, keeps state, and bad input names the field', async () => {
  const backend = Backend.memory();
  const api = backend.tokenBucket('api', 0.001, 2);
  await api.check();
  await api.check();
  assert.equal((await api.check()).allowed, false);
  await backend.setLimit('api', bucket(4));
  const d = await api.check();
  assert.deepEqual([d.allowed, d.limit, d.remaining], [true, 4, 1], 'two used of four: the state carried over');
  await backend.setLimit('api', JSON.stringify(bucket(9)), 'vip');
  assert.equal((await api.peek('vip')).limit, 9);
  const [info] = await backend.limiters();
  assert.equal(info.name, 'api');
  assert.deepEqual(info.spec, bucket(2));
  assert.deepEqual(
    info.overrides.sort((a, b) => String(a.key).localeCompare(String(b.key))),
    [
      { key: null, spec: bucket(4) },
      { key: 'vip', spec: bucket(9) },
    ],
  );
  await backend.clearLimit('api');
  assert.equal((await api.peek()).limit, 2);

  await assert.rejects(backend.setLimit('api', { kind: 'token_bucket', rate: 1, capacity: 0 }), {
    code: 'ERR_INVALID_ARGUMENT',
    parameter: 'capacity',
  });
  await assert.rejects(backend.setLimit('api', { kind: 'leaky', size: 2, drain: 60 }), {
    code: 'ERR_INVALID_ARGUMENT',
    parameter: 'spec',
  });
  await assert.rejects(backend.setLimit('api', 42), { code: 'ERR_INVALID_ARGUMENT', parameter: 'spec' });
  await assert.rejects(backend.metrics({ feet: true }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'feet' });

  const m = api.metrics();
  assert.deepEqual([m.allowed, m.refused, m.errors, m.latencyCount], [3, 1, 0, 0]);
  const [{ name, kind, metrics }] = await backend.metrics();
  assert.deepEqual([name, kind, metrics.allowed, metrics.refused], ['api', 'token_bucket', 3, 1]);
  const text = await backend.prometheus();
  assert.match(text, /^ratekeeper_checks_total\{limiter="api",kind="token_bucket",outcome="refused"\} 1$/m);
});

test('redis: a limit set by one backend reaches another; fleet metrics and the registry', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const options = { deadlineMs: 5000, connectTimeoutMs: 5000, prefix: 'nodelive' };
  const ops = Backend.redis(server.url, options);
  const worker = Backend.redis(server.url, options);
  const jobs = worker.window('jobs', 3, '1m'); // a positional duration carries its unit; specs are in seconds
  for (let i = 0; i < 5; i++) await jobs.check('k');
  await ops.setLimit('jobs', { kind: 'window', limit: 10, interval: 60 });
  await waitUntil('the worker applies the override', 20000, async () => (await jobs.peek('k')).limit === 10);
  assert.equal((await jobs.check('k')).remaining, 6, 'three admitted before, and this one');

  await worker.flush();
  const [info] = await ops.limiters();
  assert.equal(info.name, 'jobs');
  assert.ok(info.users.some((u) => u.startsWith(`node ${process.versions.node} ratekeeper/`)), info.users.join());
  assert.deepEqual(info.overrides, [{ key: null, spec: { kind: 'window', limit: 10, interval: 60 } }]);
  assert.ok(info.firstSeenMs > 0 && info.firstSeenMs <= info.lastSeenMs);

  const [fleet] = await ops.metrics({ fleet: true });
  assert.deepEqual([fleet.name, fleet.metrics.allowed, fleet.metrics.refused], ['jobs', 4, 2]);
  assert.equal(fleet.metrics.latencyCount, 6);
  const text = await ops.prometheus({ fleet: true });
  assert.match(text, /^ratekeeper_checks_total\{limiter="jobs",kind="window",outcome="allowed"\} 4$/m);
  assert.match(text, /^ratekeeper_check_duration_seconds_count\{limiter="jobs",kind="window"\} 6$/m);
});
