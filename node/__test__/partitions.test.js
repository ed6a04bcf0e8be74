'use strict';
// Leased partitions from Node on a real Redis server: two backends (as two processes would be)
// split the partitions by fair share, acquire paces to the held rate, close gives them back,
// and bad input names its parameter.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend } = require('..');
const { RedisServer } = require('./support/redis.js');

const options = { deadlineMs: 5000, connectTimeoutMs: 5000 };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('partitions: a fair share for a second member, paced acquire, close', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const make = () => Backend.redis(server.url, { ...options, prefix: 'parts' }).partitions('ingest', 60, 6, { leaseTtlMs: 3000 });
  const first = make();
  await first.check();
  assert.equal(first.partitionsHeld().length, 6);
  const second = make();
  await second.check();
  const deadline = Date.now() + 30000;
  while (second.partitionsHeld().length < 3) {
    assert.ok(Date.now() < deadline, 'the second member never got its share');
    await first.check();
    await second.check();
    await sleep(20);
  }
  await first.check();
  const indexes = [...first.partitionsHeld(), ...second.partitionsHeld()].map(([index]) => index).sort((a, b) => a - b);
  assert.deepEqual(indexes, [0, 1, 2, 3, 4, 5], 'each partition has exactly one holder');
  // 3 partitions of 10/s: 30/s, so 6 paced calls take at least 4 intervals of 33 ms.
  const stamps = [];
  for (let i = 0; i < 6; i++) stamps.push((await second.acquire(null, { waitTimeoutMs: 5000 })).decidedAtUs);
  assert.ok(stamps[5] - stamps[0] >= 4 * 33000, `${stamps}`);
  await second.close();
  assert.deepEqual(second.partitionsHeld(), []);
  await first.close();
});

test('partitions: memory holds every partition; bad input names its parameter', () => {
  const backend = new Backend();
  const limiter = backend.partitions('p', 100, 20);
  assert.equal(limiter.partitionsHeld().length, 20);
  for (const [parameter, call] of [
    ['totalRate', () => backend.partitions('p', 0, 20)],
    ['partitions', () => backend.partitions('p', 100, 0)],
    ['leaseTtlMs', () => backend.partitions('p', 100, 20, { leaseTtlMs: 10 })],
    ['reserved', () => backend.partitions('p', 100, 20, { reserved: 20 })],
    ['reserved', () => backend.partitions('p', 100, 20, { priority: true })],
  ]) {
    assert.throws(call, (e) => e.code === 'ERR_INVALID_ARGUMENT' && e.parameter === parameter, parameter);
  }
});
