'use strict';
// Redis specifics through Node: key prefixes, leases and waiters on Redis and on a Redis
// Cluster, fleet metrics summed across backends, and TLS with a CA made by openssl (the fixture's).

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend } = require('..');
const { RedisServer, RedisCluster } = require('./support/redis.js');

const options = { deadlineMs: 5000, connectTimeoutMs: 5000 };

test('redis: prefix, leases, a waiter woken by a release, fleet metrics', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const backend = Backend.redis(server.url, { ...options, prefix: 'myapp' });
  const api = backend.tokenBucket('api', 10, 2);
  assert.equal((await api.check('user-1')).remaining, 1);
  const keys = server.cli('--scan');
  assert.ok(keys.length > 0 && keys.split('\n').every((k) => k.startsWith('myapp:')), keys);
  assert.ok(Number(server.cli('TTL', keys.split('\n')[0])) > 0, 'every key has a TTL');

  const mutex = backend.concurrent('mutex', 1, { waitTimeoutMs: 60000 });
  const first = await mutex.acquire('doc');
  const waiting = mutex.acquire('doc');
  await new Promise((resolve) => setTimeout(resolve, 50));
  await mutex.release(first.lease);
  const second = await waiting;
  assert.ok(second.lease.fencingToken > first.lease.fencingToken);
  await assert.rejects(mutex.release(first.lease), { code: 'ERR_LEASE_LOST' });
  await mutex.release(second.lease);

  // Another backend on the same server (as another process would be) adds to the fleet's sum.
  const other = Backend.redis(server.url, { ...options, prefix: 'myapp' }).concurrent('mutex', 1);
  const third = await other.acquire('doc');
  await other.release(third.lease);
  assert.equal(mutex.metrics().held, 2, 'this process\'s own counts');
  assert.ok((await mutex.fleetMetrics()).held >= 2, 'its counts are flushed before the sum is read');
  const fleet = await other.fleetMetrics();
  assert.equal(fleet.held, 3);
  assert.equal(fleet.waited, 1);
});

test('redis cluster: checks and leases over three masters', async (t) => {
  const cluster = await RedisCluster.start();
  t.after(() => cluster.destroy());
  const backend = Backend.cluster(cluster.seeds, options);
  const api = backend.window('api', 3, '1s');
  for (let i = 0; i < 30; i++) assert.equal((await api.check(`user-${i}`)).allowed, true);
  const mutex = backend.concurrent('mutex', 1);
  const lease = (await mutex.check('k')).lease;
  assert.equal((await mutex.check('k')).allowed, false);
  await mutex.release(lease);
  const populated = cluster.nodes.filter((n) => Number(n.cli('DBSIZE')) > 0).length;
  assert.ok(populated >= 2, `keys spread over the slots (${populated} of 3 masters hold keys)`);
});

test('redis over TLS with a CA', async (t) => {
  const { server, ca } = await RedisServer.startTlsWithCa(t);
  t.after(() => server.destroy());
  const url = `rediss://127.0.0.1:${server.port}`;
  const secure = Backend.redis(url, { ...options, tls: { ca } }).tokenBucket('tls', 10, 10);
  assert.equal((await secure.check('k')).remaining, 9);
  const untrusted = Backend.redis(url, { deadlineMs: 500, connectTimeoutMs: 300 }).tokenBucket('tls', 10, 10);
  const error = await untrusted.check('k').catch((e) => e);
  assert.ok(['ERR_BACKEND_UNAVAILABLE', 'ERR_TIMEOUT'].includes(error.code), `an unknown CA is refused: ${error.message}`);
});

/**
 * Clients blocked by CLIENT PAUSE (CLIENT LIST flag `b`), leaving out the backends' background
 * tasks (named `ratekeeper-live`), whose metric flushes a paused server holds too.
 */
function blockedChecks(server) {
  return server
    .cli('CLIENT', 'LIST')
    .split('\n')
    .filter((line) => /(^| )flags=\S*b/.test(line) && !line.includes(' name=ratekeeper-live ')).length;
}

test('redis: an acquire aborted while its check waits on the server leaves no lease behind', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const mutex = Backend.redis(server.url, { ...options, prefix: 'aborted' }).concurrent('mutex', 1, {
    lockTimeoutMs: 60000,
  });
  await mutex.peek('doc'); // connected: the check below is sent, then held by the pause
  server.cli('CLIENT', 'PAUSE', '10000', 'WRITE');
  try {
    const controller = new AbortController();
    const call = mutex.acquire('doc', { signal: controller.signal, waitTimeoutMs: 5000 });
    // Settled here so that a failure below reports the assertion, not an unhandled rejection.
    const outcome = call.then(
      () => null,
      (error) => error,
    );
    for (let i = 0; blockedChecks(server) < 1; i++) {
      assert.ok(i < 1000, 'the check never reached the paused server');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    controller.abort();
    assert.equal((await outcome)?.code, 'ABORT_ERR');
  } finally {
    server.cli('CLIENT', 'UNPAUSE');
  }
  // The check the server ran after the abort granted a lease nobody holds: it was given back, so
  // the mutex is free now, not after lockTimeoutMs (60 s).
  const second = await mutex.acquire('doc', { waitTimeoutMs: 5000 });
  await mutex.release(second.lease);
});
