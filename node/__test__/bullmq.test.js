'use strict';
// ratekeeper/bullmq with real BullMQ workers: 4 Node worker processes on a test-started Redis,
// calling a real HTTP server (this process) that answers 429 beyond its limit. No mocks.
//
// Default shape: 200 jobs against 20 calls per 1 s window (about 10 s); RATEKEEPER_LONG_TESTS=1
// runs the shape, 200 jobs against 20 per 10 s (about 100 s).
//
// Which window does a call belong to? A real API counts by arrival, the limiter by admission
// (Redis's clock). Arrival = admission + the time to send, so an API with the same windows would
// still see a call admitted at the end of window k arrive in window k+1 (in production: the
// margin left between the two limits). To make "never an excess" exact instead of a race, the
// server files each call under its admission stamp (`X-Admitted-Us`, the admitting decision's
// `decidedAtUs`), after checking the stamp is honest: not after the arrival (same host, same
// clock) and at most 60 s old.

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { Queue } = require('bullmq');
const { RedisServer } = require('./support/redis.js');
const { Backend } = require('..');

const LONG = process.env.RATEKEEPER_LONG_TESTS === '1';
const JOBS = 200;
const LIMIT = 20;
const WINDOW_MS = LONG ? 10_000 : 1_000;
const PROCESSES = 4;

function upstream(limit, windowMs) {
  const state = { byAdmission: new Map(), calls: [], excess: 0, badStamps: [] };
  const windowUs = BigInt(windowMs * 1000);
  const server = http.createServer((req, res) => {
    const arrivalUs = BigInt(Date.now()) * 1000n;
    const url = new URL(req.url, 'http://x');
    const job = url.searchParams.get('job');
    state.calls.push(job);
    let status = 200;
    const stamp = req.headers['x-admitted-us'];
    const admittedUs = /^\d+$/.test(stamp ?? '') ? BigInt(stamp) : null;
    // Date.now() has millisecond resolution: an admission in the same millisecond as the
    // arrival may carry a stamp up to 999 µs past `arrivalUs`.
    if (admittedUs === null || admittedUs > arrivalUs + 999n || admittedUs < arrivalUs - 60_000_000n) {
      state.badStamps.push(`${job}: ${stamp} at ${arrivalUs}`);
      status = 400;
    } else {
      const w = admittedUs / windowUs;
      const n = (state.byAdmission.get(w) ?? 0) + 1;
      state.byAdmission.set(w, n);
      if (n > limit) {
        state.excess += 1;
        status = 429;
      }
    }
    res.writeHead(status, { 'Content-Length': '0' });
    res.end();
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, state, url: `http://127.0.0.1:${server.address().port}` })));
}

function startWorker(config) {
  const child = spawn(process.execPath, [path.join(__dirname, 'support', 'bullmq-worker.js'), JSON.stringify(config)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ready = new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      if (out.includes('ready')) resolve();
    });
    child.on('exit', (code) => reject(new Error(`worker exited with ${code} before it was ready`)));
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return { child, ready, stop: () => (child.exitCode === null && child.kill('SIGTERM'), exited) };
}

async function settled(queue, total) {
  // Polling the queue's counts is the test waiting for the outcome, not timing anything.
  for (;;) {
    const counts = await queue.getJobCounts('completed', 'failed');
    if (counts.completed + counts.failed >= total) return counts;
    await new Promise((r) => setTimeout(r, 100));
  }
}

test(`${JOBS} jobs against ${LIMIT} per ${WINDOW_MS} ms over ${PROCESSES} BullMQ worker processes`, async (t) => {
  const redis = await RedisServer.start();
  const api = await upstream(LIMIT, WINDOW_MS);
  const config = { port: redis.port, queue: 'rk-test', prefix: `bq${process.pid}`, upstream: api.url, limit: LIMIT, windowMs: WINDOW_MS, concurrency: 5 };
  const workers = Array.from({ length: PROCESSES }, () => startWorker(config));
  const queue = new Queue(config.queue, { connection: { host: '127.0.0.1', port: redis.port }, prefix: config.prefix });
  // In this order: the workers and the queue before the Redis they use.
  t.after(async () => {
    await Promise.all(workers.map((w) => w.stop()));
    await queue.close();
    api.server.closeAllConnections();
    api.server.close();
    await redis.destroy();
  });
  await Promise.all(workers.map((w) => w.ready));
  // Take all of a fresh window's calls (not sent to the API) at its very start, so the first
  // jobs are refused whatever the workers' speed (which this test does not assume). The buckets
  // are aligned to the epoch; Redis runs on this host, so its TIME is this clock.
  const filler = Backend.redis(redis.url, { prefix: config.prefix, deadlineMs: 5000 }).bucket('upstream', LIMIT, `${WINDOW_MS}ms`);
  await new Promise((r) => setTimeout(r, WINDOW_MS - (Date.now() % WINDOW_MS)));
  assert.equal((await filler.check(null, LIMIT)).allowed, true);

  // attempts: 1 — a reschedule that spent an attempt would fail the job.
  await queue.addBulk(Array.from({ length: JOBS }, (_, n) => ({ name: 'call', data: { n }, opts: { attempts: 1 } })));
  const refusedJob = await queue.add('refused', {}, { attempts: 1 });
  const counts = await settled(queue, JOBS + 1);

  const done = (await queue.getCompleted(0, -1)).map((job) => job.returnvalue);
  const failures = (await queue.getFailed(0, -1)).filter((job) => job.name !== 'refused');
  assert.deepEqual(failures.map((job) => `${job.name} ${job.id}: ${job.failedReason}`), []);
  assert.equal(counts.completed, JOBS);
  assert.deepEqual(done.map((d) => d.n).sort((a, b) => a - b), Array.from({ length: JOBS }, (_, n) => n));
  assert.deepEqual(done.filter((d) => d.status !== 200), []);
  assert.equal(api.state.excess, 0);
  assert.deepEqual(api.state.badStamps, []);
  assert.equal(api.state.calls.length, JOBS);
  assert.ok(Math.max(...api.state.byAdmission.values()) <= LIMIT);
  assert.ok(done.every((d) => d.attemptsMade === 0), 'a reschedule spent an attempt');
  const total = done.reduce((n, d) => n + d.reschedules, 0);
  assert.ok(total >= 1, 'no job was rescheduled');
  const pids = new Set(done.map((d) => d.pid));
  assert.ok(pids.size >= 2, 'the jobs ran in one process');

  // The job refused every time: 3 reschedules, then failed with the over-limit error.
  const refused = await queue.getJob(refusedJob.id);
  assert.equal(await refused.getState(), 'failed');
  assert.match(refused.failedReason, /over limit/);
  assert.equal(refused.data.ratekeeperReschedules, 3);
  t.diagnostic(`${total} reschedules over ${pids.size} worker processes`);
});

test('limited() refuses bad arguments when the processor is made, naming them', () => {
  const { limited } = require('../bullmq');
  const { Backoff: B } = require('..');
  const limiter = Backend.memory().bucket('b', 1, '1s');
  const processor = async () => {};
  const cases = [
    [() => limited('stripe', processor), 'limiter'],
    [() => limited(limiter, 'not a function'), 'processor'],
    [() => limited(limiter, processor, null), 'options'],
    [() => limited(limiter, processor, { key: 42 }), 'key'],
    [() => limited(limiter, processor, { backoff: { maxReschedules: 3 } }), 'backoff'],
  ];
  for (const [make, parameter] of cases) {
    assert.throws(make, { code: 'ERR_INVALID_ARGUMENT', parameter });
  }
  assert.equal(typeof limited(limiter, processor, { key: (job) => job.id, backoff: new B() }), 'function');
});

test('a concurrent limiter is held for the whole processor, in a real BullMQ worker', async (t) => {
  const { Worker } = require('bullmq');
  const { limited, currentDecision, reschedules } = require('../bullmq');
  const { Backoff: B } = require('..');
  const redis = await RedisServer.start();
  const connection = { host: '127.0.0.1', port: redis.port, maxRetriesPerRequest: null };
  const prefix = `bqc${process.pid}`;
  const backend = Backend.redis(redis.url, { prefix, deadlineMs: 5000 });
  // One slot; a refused job is retried when the holder's lease could be reclaimed (1 s).
  const erp = backend.concurrent('erp', 1, { lockTimeoutMs: 1000, waitTimeoutMs: 0 });
  let running = 0;
  let most = 0;
  const processor = limited(
    erp,
    async (job) => {
      running += 1;
      most = Math.max(most, running);
      const decision = currentDecision();
      await new Promise((r) => setTimeout(r, 100));
      running -= 1;
      return { fencingToken: decision.lease.fencingToken, reschedules: reschedules(job) };
    },
    { backoff: new B({ baseMs: 10, jitterMs: 50, maxReschedules: 1000 }) },
  );
  const worker = new Worker('erp', processor, { connection, prefix, concurrency: 4 });
  const queue = new Queue('erp', { connection, prefix });
  t.after(async () => {
    await worker.close(true);
    await queue.close();
    await redis.destroy();
  });
  await queue.addBulk(Array.from({ length: 4 }, (_, n) => ({ name: 'sync', data: { n }, opts: { attempts: 1 } })));
  const counts = await settled(queue, 4);
  assert.equal(counts.completed, 4);
  assert.equal(most, 1); // never two bodies at once: the slot was held for the whole processor
  const done = (await queue.getCompleted(0, -1)).map((job) => job.returnvalue);
  assert.equal(new Set(done.map((d) => d.fencingToken)).size, 4); // four leases, four tokens
  assert.equal((await erp.peek()).remaining, 1); // every lease released
});
