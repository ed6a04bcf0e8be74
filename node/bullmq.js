'use strict';
// ratekeeper/bullmq: run a BullMQ job under a limiter and, when the limiter refuses, put the job
// back as delayed (Sidekiq Enterprise's reschedule with backoff) instead of failing it.
//
// Why moveToDelayed + DelayedError rather than throwing: a thrown error spends one of the job's
// `attempts` and runs BullMQ's own backoff; a job refused for being over limit has not failed.
// BullMQ's documented pattern for "run me later" is `job.moveToDelayed(timestamp, token)`
// followed by `throw new DelayedError()`, which leaves `attemptsMade` as it was. The number of
// reschedules is kept in the job's data (`ratekeeperReschedules`), as it must survive the trip
// through Redis and be visible to whichever worker process runs the job next.

const { AsyncLocalStorage } = require('node:async_hooks');
const { DelayedError } = require('bullmq');
const { Backoff, Limiter, codes } = require('./index.js');

/** The job-data field counting a job's reschedules for being over limit. */
const RESCHEDULES = 'ratekeeperReschedules';

const current = new AsyncLocalStorage();

/** The decision that admitted the running processor (undefined outside a limited processor). */
function currentDecision() {
  return current.getStore();
}

/** How many times `job` was rescheduled for being over limit (0 on its first run). */
function reschedules(job) {
  const n = job && job.data && typeof job.data === 'object' ? job.data[RESCHEDULES] : undefined;
  return Number.isInteger(n) && n > 0 ? n : 0;
}

function invalidArgument(parameter, message) {
  const error = new Error(`invalid argument \`${parameter}\`: ${message}`);
  error.code = codes.INVALID_ARGUMENT;
  error.parameter = parameter;
  return error;
}

function overLimit(limiter, retryAfterMs) {
  const error = new Error(`over limit: \`${limiter.name}\` retry after ${(retryAfterMs / 1e3).toFixed(6)}s`);
  error.code = codes.OVER_LIMIT;
  error.retryAfterMs = retryAfterMs;
  return error;
}

function option(value, name, job) {
  return typeof value === 'function' ? value(job) : value;
}

/**
 * Wraps a BullMQ processor so it runs only when `limiter` admits the job, and is rescheduled
 * with `backoff` (default: Sidekiq's 300·n + rand(300) s, 20 times) when it does not. Rate
 * limiters are checked without waiting; a concurrent limiter is held for the whole processor
 * (waiting up to its `waitTimeoutMs`). An over-limit error thrown by the processor itself
 * (`code === 'ERR_OVER_LIMIT'`) reschedules the job too. After `backoff.maxReschedules`
 * reschedules the job fails with the over-limit error (then BullMQ's `attempts` apply).
 */
function limited(limiter, processor, options = {}) {
  if (!(limiter instanceof Limiter)) throw invalidArgument('limiter', 'must be a ratekeeper Limiter');
  if (typeof processor !== 'function') throw invalidArgument('processor', 'must be a function');
  if (options === null || typeof options !== 'object') throw invalidArgument('options', 'must be an object');
  const { key = null, cost = 1, backoff = new Backoff() } = options;
  if (!(key === null || typeof key === 'string' || typeof key === 'function')) {
    throw invalidArgument('key', "must be a string, null or a function of the job");
  }
  if (!(backoff instanceof Backoff)) throw invalidArgument('backoff', 'must be a ratekeeper Backoff');

  return async function limitedProcessor(job, token, ...rest) {
    const k = option(key, 'key', job);
    const c = option(cost, 'cost', job);
    try {
      if (limiter.kind === 'concurrent') {
        return await limiter.withinLimit((permit) => current.run(permit.decision, () => processor(job, token, ...rest)), {
          key: k,
          cost: c,
        });
      }
      const decision = await limiter.check(k, c);
      if (!decision.allowed) throw overLimit(limiter, decision.retryAfterMs);
      return await current.run(decision, () => processor(job, token, ...rest));
    } catch (error) {
      if (!error || error.code !== codes.OVER_LIMIT) throw error;
      const attempt = reschedules(job) + 1;
      const delayMs = backoff.rescheduleIn(attempt, error.retryAfterMs ?? 0);
      if (delayMs === null) throw error;
      // The count first: if the move fails, the job is retried by BullMQ with the count kept.
      await job.updateData({ ...job.data, [RESCHEDULES]: attempt });
      await job.moveToDelayed(Date.now() + Math.ceil(delayMs), token);
      throw new DelayedError();
    }
  };
}

module.exports = { limited, currentDecision, reschedules, RESCHEDULES };
