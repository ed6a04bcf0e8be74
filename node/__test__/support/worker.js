'use strict';
// A worker thread for workers.test.js: loads the addon, uses it (memory, Promises, Redis), and
// leaves calls in flight for terminate() to cut off.
const { parentPort, workerData } = require('node:worker_threads');
const rk = require('../..');

(async () => {
  const exported = ['Backend', 'Limiter', 'ManualClock', 'FleetShedder', 'UtilizationShedder', 'rateLimitHeaders'];
  const defined = exported.filter((name) => typeof rk[name] === 'function');
  const backend = rk.Backend.memory();
  const limiter = backend.tokenBucket('w', 100, 10);
  const sync = limiter.checkSync('k');
  const promised = await limiter.check('k');
  const redis = rk.Backend.redis(workerData.url, { deadlineMs: 5000 });
  const remote = await redis.tokenBucket('w', 1000, 1000).check(`worker-${workerData.index}`);
  // Until this thread's own driven connection is live (node/src/driven.rs): terminate() must
  // close it with the rest.
  const native = require('../../ratekeeper.node');
  for (let i = 0; i < 500 && native.drivenConnections() === 0; i++) {
    await redis.tokenBucket('w', 1000, 1000).check('connect');
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  // In flight when the worker is terminated: a memory wait, and Redis calls.
  const mutex = backend.concurrent('m', 1);
  await mutex.acquire();
  mutex.acquire(undefined, { waitTimeoutMs: 60000 }).catch(() => {});
  const shared = redis.concurrent(`held-${workerData.round}`, 1, { waitTimeoutMs: 1500 });
  shared.acquire('k').catch(() => {});
  for (let i = 0; i < 20; i++) redis.tokenBucket('w', 1000, 1000).check('x').catch(() => {});
  const driven = native.drivenConnections();
  parentPort.postMessage({ defined, driven, allowed: sync.allowed && promised.allowed && remote.allowed });
})().catch((error) => parentPort.postMessage({ error: String(error && error.stack) }));
