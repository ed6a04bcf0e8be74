'use strict';
// Redis refusals an operator must fix are ERR_BACKEND_REJECTED (with the Redis code in
// `redisCode`) under every failure policy, never admitted by fail_open, and counted; a server
// that accepts and never answers is ERR_TIMEOUT at the deadline, with the core's one message.

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { Backend, codes } = require('..');
const { RedisServer, watchdog } = require('./support/redis.js');

test('NOPERM and WRONGPASS are ERR_BACKEND_REJECTED, not failed open', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  server.cli('ACL', 'SETUSER', 'limited', 'on', '>secret', '~*', '+@all', '-evalsha', '-eval');
  for (const [password, redisCode] of [['secret', 'NOPERM'], ['wrong', 'WRONGPASS']]) {
    const url = `redis://limited:${password}@127.0.0.1:${server.port}`;
    const backend = Backend.redis(url, { failurePolicy: 'fail_open', deadlineMs: 1000 });
    const limiter = backend.window('w', 10, '1m');
    for (const call of [() => limiter.check('k'), () => limiter.peek('k')]) {
      const error = await call().then(
        (d) => assert.fail(`admitted: ${JSON.stringify(d)}`),
        (e) => e,
      );
      assert.equal(error.code, codes.BACKEND_REJECTED, error.message);
      assert.equal(error.code, 'ERR_BACKEND_REJECTED');
      assert.equal(error.redisCode, redisCode, error.message);
    }
    const stats = backend.stats();
    assert.deepEqual([stats.failedOpen, stats.failed, stats.rejected], [0, 0, 2], JSON.stringify(stats));
  }
});

test('a server that accepts and never answers is ERR_TIMEOUT at the deadline', async (t) => {
  const held = [];
  const listener = net.createServer((socket) => held.push(socket));
  await new Promise((resolve) => listener.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    for (const s of held) s.destroy();
    listener.close();
  });
  const url = `redis://127.0.0.1:${listener.address().port}`;
  const limiter = Backend.redis(url, { deadlineMs: 1500 }).window('w', 10, '1m');
  for (let i = 0; i < 2; i++) {
    // An ordering, not a latency bound: the call times out while its connection still hangs,
    // before a watchdog (at 4 deadlines + 2 s) ends the hang by closing the held connections.
    const endHang = watchdog(4 * 1500 + 2000, () => {
      for (const s of held.splice(0)) s.destroy();
    });
    const started = process.hrtime.bigint();
    const error = await limiter.check('k').then(() => assert.fail('admitted'), (e) => e);
    const tookMs = Number(process.hrtime.bigint() - started) / 1e6;
    assert.ok(!endHang.stop(), `ended only after the hang was ended: ${error.message}`);
    assert.equal(error.code, 'ERR_TIMEOUT', error.message);
    assert.equal(
      error.message,
      `timed out: Redis at 127.0.0.1:${listener.address().port} did not answer within 1.5s; is it reachable from here and not overloaded? A slow link needs a longer deadline`,
    );
    assert.ok(tookMs >= 1499, `timed out after ${tookMs} ms, before the deadline`);
  }
});
