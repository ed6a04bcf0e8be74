'use strict';
// worker_threads: the addon loads in the main thread and in 8 workers at once, workers are
// terminated (with calls in flight) and re-created 25 times (100 with RATEKEEPER_LONG_TESTS=1, or
// RATEKEEPER_WORKER_ROUNDS=N); nothing crashes, the exports are
// defined everywhere, and threads and handles come back to the baseline. The core's runtime is
// process-wide and lives as long as the process: it is not restarted per worker, so its thread
// count stays fixed however many workers come and go.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const rk = require('..');
const { RedisServer } = require('./support/redis.js');

const WORKERS = 8;
const ROUNDS = Number(process.env.RATEKEEPER_WORKER_ROUNDS || (process.env.RATEKEEPER_LONG_TESTS === '1' ? 100 : 25));

function threads() {
  return Number(/^Threads:\s+(\d+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]);
}

const settle = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test(`addon in the main thread and ${WORKERS} workers, terminated and re-created ${ROUNDS} times`, async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const limiter = rk.Backend.redis(server.url, { deadlineMs: 5000 }).tokenBucket('main', 1000, 1000);
  assert.equal((await limiter.check('main')).allowed, true);
  await settle(100);
  const baselineThreads = threads();
  const baselineResources = process.getActiveResourcesInfo().length;

  let maxThreads = baselineThreads;
  for (let round = 0; round < ROUNDS; round++) {
    const workers = [];
    const replies = [];
    for (let index = 0; index < WORKERS; index++) {
      const worker = new Worker(path.join(__dirname, 'support', 'worker.js'), {
        workerData: { url: server.url, index, round },
      });
      workers.push(worker);
      replies.push(
        new Promise((resolve, reject) => {
          worker.once('message', resolve);
          worker.once('error', reject);
        }),
      );
    }
    for (const reply of await Promise.all(replies)) {
      assert.equal(reply.error, undefined, reply.error);
      assert.equal(reply.defined.length, 6, `exports in a worker: ${reply.defined}`);
      assert.equal(reply.allowed, true);
      assert.equal(reply.driven, 1, 'the worker drives its own Redis connection');
    }
    maxThreads = Math.max(maxThreads, threads());
    // The main thread keeps working while workers come and go.
    assert.equal((await limiter.check('main')).allowed, true);
    await Promise.all(workers.map((w) => w.terminate()));
  }

  // Workers' threads are gone; the runtime's threads are the same as before the first worker.
  let now = threads();
  for (let i = 0; i < 100 && now > baselineThreads; i++) {
    await settle(100);
    now = threads();
  }
  console.log(`threads: baseline ${baselineThreads}, peak ${maxThreads} with ${WORKERS} workers, after ${now}`);
  assert.ok(now <= baselineThreads, `threads back to baseline: ${now} > ${baselineThreads}`);
  assert.ok(maxThreads <= baselineThreads + WORKERS * 8, `thread count bounded: ${maxThreads}`);
  assert.equal(process.getActiveResourcesInfo().length, baselineResources, 'handles back to baseline');
  assert.equal((await limiter.check('main')).allowed, true);
});
