'use strict';
// One worker process of bullmq.test.js: a BullMQ Worker whose processor is wrapped by
// ratekeeper/bullmq's `limited`, calling the test's HTTP server. Config: JSON in argv[2].
// Prints "ready" once the worker is running; closes gracefully on SIGTERM.

const { Worker } = require('bullmq');
const { Backend, Backoff } = require('../..');
const { limited, currentDecision, reschedules } = require('../../bullmq');

const config = JSON.parse(process.argv[2]);
const connection = { host: '127.0.0.1', port: config.port, maxRetriesPerRequest: null };
// A generous per-call deadline: the test machine may be loaded (the default, 200 ms, is for
// production latency; a timed-out check would fail the job, as fail_closed should).
const backend = Backend.redis(`redis://127.0.0.1:${config.port}`, { prefix: config.prefix, deadlineMs: 5000 });

// Small steps, so the delay is the limiter's retryAfterMs; the jitter spreads refused jobs over
// the next window.
const api = backend.bucket('upstream', config.limit, `${config.windowMs}ms`);
const backoff = new Backoff({ baseMs: 10, jitterMs: config.windowMs / 2, maxReschedules: 10_000 });
const callUpstream = limited(
  api,
  async (job) => {
    const decision = currentDecision();
    const response = await fetch(`${config.upstream}/call?job=${job.data.n}`, {
      headers: { 'X-Admitted-Us': String(decision.decidedAtUs) },
    });
    return { n: job.data.n, status: response.status, reschedules: reschedules(job), attemptsMade: job.attemptsMade, pid: process.pid };
  },
  { backoff },
);

// Every run is refused from inside (as if the API had answered 429 with a Retry-After of
// 50 ms): rescheduled 3 times, then failed.
const roomy = backend.tokenBucket('roomy', 1000, 1000);
const refused = limited(
  roomy,
  async () => {
    const error = new Error('over limit: the API said 429');
    error.code = 'ERR_OVER_LIMIT';
    error.retryAfterMs = 50;
    throw error;
  },
  { key: (job) => `job-${job.id}`, backoff: new Backoff({ baseMs: 10, jitterMs: 0, maxReschedules: 3 }) },
);

const worker = new Worker(config.queue, (job, token) => (job.name === 'refused' ? refused(job, token) : callUpstream(job, token)), {
  connection,
  prefix: config.prefix,
  concurrency: config.concurrency,
});
worker.on('error', (error) => console.error('worker error:', error));
worker.waitUntilReady().then(() => process.stdout.write('ready\n'));
process.on('SIGTERM', () => {
  // Forced: jobs still delayed stay in Redis; there is nothing to finish gracefully, and a
  // graceful close would wait on a Redis the test may already have stopped.
  setTimeout(() => process.exit(0), 2000).unref();
  worker.close(true).finally(() => process.exit(0));
});
