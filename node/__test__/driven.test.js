'use strict';
// Redis calls driven on the JavaScript thread (node/src/driven.rs): the connection is used,
// batches answer every call in order, a flushed script cache, a killed, a hung and a restarted
// server all end each call as the failure policy says, and the connection is replaced.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend } = require('..');
const native = require('../ratekeeper.node');
const { RedisServer, waitUntil, watchdog } = require('./support/redis');

/** Checks until one is answered on the driven connection (the first calls run on the runtime
 * while it connects). */
async function driven(limiter, key) {
  await waitUntil('a driven connection', 10_000, async () => {
    await limiter.check(key, 0);
    return native.drivenConnections() > 0;
  });
}

test('driven connection: used, batches in order, flushed script cache, kill, hang, restart', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const backend = Backend.redis(server.url, { deadlineMs: 300, connectTimeoutMs: 300, prefix: 'driven' });
  const bucket = backend.tokenBucket('api', 1, 100);
  await driven(bucket, 'warmup');

  // 250 concurrent checks on one key (more than one batch): exactly the capacity is admitted,
  // and each call's remaining count is distinct (every reply went to its own call).
  const decisions = await Promise.all(Array.from({ length: 250 }, () => bucket.check('k')));
  const allowed = decisions.filter((d) => d.allowed);
  assert.equal(allowed.length, 100);
  assert.deepEqual(new Set(allowed.map((d) => d.remaining)).size, 100);
  assert.ok(decisions.filter((d) => !d.allowed).every((d) => d.retryAfterMs > 0));
  const peeked = await bucket.peek('k');
  assert.equal(peeked.remaining, 0);
  assert.ok(native.drivenConnections() > 0, 'the calls went over the driven connection');

  // A call made while another connection's replies settle (a continuation) is written at once:
  // it does not wait for a reply that connection is not expecting.
  const other = await RedisServer.start();
  t.after(() => other.destroy());
  const otherBucket = Backend.redis(other.url, { deadlineMs: 300, connectTimeoutMs: 300 }).tokenBucket('api', 1, 100);
  await driven(otherBucket, 'warmup');
  await waitUntil('two driven connections', 10_000, async () => {
    await otherBucket.check('warmup', 0);
    return native.drivenConnections() === 2;
  });
  const chained = await Promise.all(
    Array.from({ length: 20 }, (_, i) => bucket.check(`chain${i}`).then(() => otherBucket.check(`chain${i}`))),
  );
  assert.ok(chained.every((d) => d.allowed && d.remaining === 99), JSON.stringify(chained[0]));

  // A flushed script cache: the calls run again on the runtime (EVAL reloads the script).
  server.cli('SCRIPT', 'FLUSH');
  const afterFlush = await Promise.all(Array.from({ length: 5 }, (_, i) => bucket.check(`flush${i}`)));
  assert.ok(afterFlush.every((d) => d.allowed && d.remaining === 99));

  // A hung server: calls end with ERR_TIMEOUT at their deadline, while the server is still
  // stopped (an ordering: a watchdog resumes it after 5 s; a call that waited on the server
  // instead of its 300 ms deadline would be answered only then).
  process.kill(server.pid, 'SIGSTOP');
  const resume = watchdog(5_000, () => process.kill(server.pid, 'SIGCONT'));
  try {
    const hung = await Promise.allSettled(Array.from({ length: 10 }, () => bucket.check('hung')));
    assert.ok(!resume.fired, 'the calls settled only after the server was resumed');
    assert.ok(hung.every((r) => r.status === 'rejected' && r.reason.code === 'ERR_TIMEOUT'), JSON.stringify(hung));
  } finally {
    if (!resume.stop()) process.kill(server.pid, 'SIGCONT');
  }
  await driven(bucket, 'resumed');

  // fail_open on a killed server allows; after a restart on the same port calls are answered
  // by Redis again, over a new driven connection.
  const open = Backend.redis(server.url, { deadlineMs: 300, connectTimeoutMs: 300, failurePolicy: 'fail_open' });
  const openBucket = open.tokenBucket('open', 1, 5);
  await driven(openBucket, 'warmup');
  await server.stop();
  const whileDown = await Promise.all(Array.from({ length: 10 }, () => openBucket.check('down')));
  assert.ok(whileDown.every((d) => d.allowed && d.remaining === 5), 'fail_open answers with full capacity');
  await server.launch();
  await waitUntil('answers from the restarted server', 10_000, async () => (await openBucket.check('up')).remaining < 5);
  await driven(openBucket, 'restarted');
  const counted = await Promise.all(Array.from({ length: 3 }, () => openBucket.check('after')));
  assert.deepEqual(counted.map((d) => d.remaining).sort(), [2, 3, 4]);
});

test('driven connection: each call keeps its own deadline; a timed-out connection drains', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const options = (deadlineMs) => ({ deadlineMs, connectTimeoutMs: 300, prefix: 'deadlines' });
  const short = Backend.redis(server.url, options(150)).tokenBucket('api', 0.001, 10);
  const long = Backend.redis(server.url, options(5_000)).tokenBucket('api', 0.001, 10);
  await driven(long, 'warmup');
  await driven(short, 'warmup');
  assert.equal(native.drivenConnections(), 1, 'backends alike but for the deadline share the connection');

  process.kill(server.pid, 'SIGSTOP');
  let longCall;
  try {
    longCall = long.check('k');
    let longSettled = false;
    longCall.finally(() => (longSettled = true)).catch(() => {});
    const shortCall = short.check('k');
    await assert.rejects(shortCall, (e) => e.code === 'ERR_TIMEOUT');
    // Orderings: the short call timed out on the shared connection while the long one, sent
    // first, still waited (and the server stays stopped until the `finally`).
    assert.ok(!longSettled, 'the short call timed out only after the long call settled');
    // Well past the short deadline: the long call is still waiting for its reply.
    await new Promise((resolve) => setTimeout(resolve, 300));
  } finally {
    process.kill(server.pid, 'SIGCONT');
  }
  const decision = await longCall;
  assert.ok(decision.allowed && decision.remaining === 9, JSON.stringify(decision));
  // The short call ran on the server too (its reply came late and was dropped).
  assert.equal((await long.peek('k')).remaining, 8);
  // The drained connection was replaced: calls are driven again.
  await driven(long, 'after');
  assert.equal(native.drivenConnections(), 1);
});

test('driven connection: a call to a server that never answers ends by its deadline, not the connect timeout', async (t) => {
  // Issue #31, item 15. The connect timeout (20 s) is far longer than the deadline (300 ms): no
  // call waits for the driven connection's connect or handshake, whether the server hangs before
  // the first call or after the connection was made (then the connection drains and its
  // replacement's connect hangs).
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const options = { deadlineMs: 300, connectTimeoutMs: 20_000, prefix: 'unreachable' };
  /** Runs `calls` on the stopped server: every call ends with ERR_TIMEOUT before a watchdog
   * resumes the server after 10 s (an ordering, not a timing: a call that waited for the
   * connect would end only after it). */
  const onStoppedServer = async (what, calls) => {
    process.kill(server.pid, 'SIGSTOP');
    const resume = watchdog(10_000, () => process.kill(server.pid, 'SIGCONT'));
    try {
      const results = await calls();
      assert.ok(!resume.fired, `${what}: the calls settled only after the server was resumed`);
      assert.ok(results.length > 0 && results.every((r) => r.status === 'rejected' && r.reason.code === 'ERR_TIMEOUT'),
        `${what}: ${JSON.stringify(results)}`);
    } finally {
      if (!resume.stop()) process.kill(server.pid, 'SIGCONT');
    }
  };
  const oneAfterAnother = async (limiter, n) => {
    const results = [];
    for (let i = 0; i < n; i++) results.push(...(await Promise.allSettled([limiter.check(`seq${i}`)])));
    return results;
  };

  const fresh = Backend.redis(server.url, options).tokenBucket('fresh', 1, 100);
  await onStoppedServer('before any connection, at once', () =>
    Promise.allSettled(Array.from({ length: 10 }, () => fresh.check('k'))));
  await onStoppedServer('before any connection, one after another', () => oneAfterAnother(fresh, 5));

  const bucket = Backend.redis(server.url, options).tokenBucket('live', 1, 100);
  await driven(bucket, 'warmup');
  await onStoppedServer('after the connection was made', () => oneAfterAnother(bucket, 8));
});

test('driven connection: calls made outside a settle are written while earlier batches await replies, up to a bound; a drop with batches in flight ends each call once', async (t) => {
  // An HTTP request's check is made in its socket's callback, not in the settling of a reply:
  // it must not wait for the reply of a batch already on the connection (app and Redis would
  // take turns), yet the batches on the connection stay bounded.
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const backend = Backend.redis(server.url, { deadlineMs: 60_000, connectTimeoutMs: 300, failurePolicy: 'fail_closed', prefix: 'inflight' });
  const bucket = backend.tokenBucket('api', 0.001, 100);
  await driven(bucket, 'warmup');
  // A timer callback runs after the event loop blocked for I/O, which it does only after
  // writing what was queued: each call below is made in a later turn than the one before.
  const nextTurn = () => new Promise((resolve) => setTimeout(resolve, 5));
  const CALLS = 8;
  /** With the server holding scripts (a write pause), makes CALLS checks of `key`, one per turn
   * of the event loop; returns their settlements and how many batches were then in flight. */
  const callsWhilePaused = async (key) => {
    server.cli('CLIENT', 'PAUSE', '60000', 'WRITE');
    const calls = [];
    for (let i = 0; i < CALLS; i++) {
      calls.push(Promise.allSettled([bucket.check(key)]).then(([r]) => r));
      await nextTurn();
    }
    return { calls, inFlight: native.drivenInFlight() };
  };

  const held = await callsWhilePaused('k');
  server.cli('CLIENT', 'UNPAUSE');
  const answered = await Promise.all(held.calls);
  t.diagnostic(`writes in flight with ${CALLS} calls made one per loop turn: ${held.inFlight}`);
  assert.ok(held.inFlight >= 2, `a batch was written while another awaited its reply (in flight: ${held.inFlight})`);
  assert.ok(held.inFlight < CALLS, `the batches in flight are bounded (in flight: ${held.inFlight} of ${CALLS})`);
  assert.deepEqual(answered.map((r) => r.status === 'fulfilled' && r.value.remaining),
    Array.from({ length: CALLS }, (_, i) => 99 - i), 'every call answered by its own reply, in order');

  // The connection is killed while the server holds its batches (and more calls are queued):
  // each call ends once, with the connection's error, and none of them ran.
  const dropped = await callsWhilePaused('dropped');
  server.cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
  server.cli('CLIENT', 'UNPAUSE');
  const failed = await Promise.all(dropped.calls);
  assert.ok(dropped.inFlight >= 2, `in flight: ${dropped.inFlight}`);
  assert.ok(failed.every((r) => r.status === 'rejected' && r.reason.code === 'ERR_BACKEND_UNAVAILABLE'), JSON.stringify(failed));
  await waitUntil('the server answers again', 10_000, async () => (await Promise.allSettled([bucket.peek('k')]))[0].status === 'fulfilled');
  assert.equal((await bucket.peek('dropped')).remaining, 100, 'no call of the killed connection ran');
  assert.equal((await bucket.peek('k')).remaining, 100 - CALLS);
});
