'use strict';

// A Sentinel-managed primary through the Node binding, on real processes (`rk-test-redis start
// --sentinel`: a primary, two replicas, three `redis-server --sentinel`, down-after 1 s):
// `Backend.sentinel` and the `redis+sentinel://` URL, promise calls (the event loop's own socket)
// and sync calls; a SIGKILLed primary followed by both with its count; `replicaAcks`.

const test = require('node:test');
const assert = require('node:assert');

const { Backend } = require('..');
const { RedisSentinelGroup, waitUntil } = require('./support/redis');

const GIVE_UP_MS = 30_000;
let prefixes = 0;
const prefix = () => `node${process.pid}s${prefixes++}`;

test('Backend.sentinel follows a killed primary to the promoted replica, with its count', async () => {
  const group = await RedisSentinelGroup.start();
  try {
    const p = prefix();
    const backend = Backend.sentinel({ sentinels: group.addresses, service: group.service, prefix: p, deadlineMs: 1000 });
    const limiter = backend.window('w', 1000, '1h');
    for (let i = 0; i < 10; i++) {
      assert.ok((await limiter.check('k')).allowed);
      assert.ok(limiter.checkSync('k').allowed);
    }
    const url = `redis+sentinel://${group.addresses.join(',')}/${group.service}`;
    const same = Backend.redis(url, { prefix: p, deadlineMs: 1000 }).window('w', 1000, '1h');
    assert.strictEqual(same.peekSync('k').remaining, 980);

    const old = group.primaryPort();
    const primary = group.nodes.find((n) => n.port === old);
    assert.strictEqual(primary.cli('WAIT', '2', '10000'), '2', 'both replicas hold the 20');
    await primary.stop();
    const answered = async (call) => {
      for (const began = Date.now(); Date.now() - began < GIVE_UP_MS; ) {
        try {
          if ((await call()).allowed) return Date.now();
        } catch {}
        await new Promise((r) => setTimeout(r, 10));
      }
      throw new Error('never answered again');
    };
    const promise = answered(() => limiter.check('k'));
    let promoted = null;
    await waitUntil('a failover', GIVE_UP_MS, () => {
      const port = group.primaryPort();
      const node = group.nodes.find((n) => n.port === port);
      const now = port !== null && port !== old && node.cli('ROLE').startsWith('master');
      if (now) promoted = Date.now();
      return now;
    });
    const asyncAt = await promise;
    const syncAt = await answered(async () => limiter.checkSync('k'));
    console.log(`promoted; promise calls answered ${Math.max(0, asyncAt - promoted)} ms after it`);
    assert.ok(asyncAt - promoted <= 1000, `promise calls answered ${asyncAt - promoted} ms after the promotion`);
    assert.ok(syncAt >= asyncAt);
    assert.strictEqual(limiter.peekSync('k').remaining, 1000 - 22, 'the promoted replica held the 20');

    // One replica is left to follow the new primary: replicaAcks 1 admits once it does; 3 can
    // never be met, so the call fails as unavailable.
    const where = { sentinels: group.addresses, service: group.service, deadlineMs: 1000 };
    const acked = Backend.sentinel({ ...where, prefix: prefix(), replicaAcks: 1 });
    await waitUntil('the other replica following the new primary', GIVE_UP_MS, async () => {
      try {
        return (await acked.window('w', 10, '1m').check('k')).allowed;
      } catch {
        return false;
      }
    });
    const tooMany = Backend.sentinel({ ...where, prefix: prefix(), replicaAcks: 3 });
    await assert.rejects(tooMany.window('w', 10, '1m').check('k'), { code: 'ERR_BACKEND_UNAVAILABLE' });
  } finally {
    await group.destroy();
  }
});
