'use strict';
// The shared bad-input table (tests/bad_input/cases.json) through the Node API: every case
// throws (synchronous calls) or rejects (Promise-returning calls) with the table's error code,
// naming the table's JavaScript parameter, and writes nothing. The same table runs through
// Python (py/tests/test_bad_input.py) and C (tests/bad_input/run_c.c). Durations are seconds in
// the table and milliseconds here, the unit of the Node API.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Backend, Backoff, ManualClock } = require('..');

const TABLE = JSON.parse(fs.readFileSync(path.resolve(__dirname, '..', '..', 'tests', 'bad_input', 'cases.json'), 'utf8'));
const START_US = 1_700_000_000_000_000;
const CODES = { invalid_argument: 'ERR_INVALID_ARGUMENT' };

/** The case cannot be written in JavaScript; the message says why (reported as the skip). */
class NotExpressible extends Error {}

/** Decodes the table's special values (see its `conventions.values`). */
function value(v) {
  if (Array.isArray(v)) return v.map(value);
  if (v !== null && typeof v === 'object') {
    if ('number' in v) return { NaN, Infinity, '-Infinity': -Infinity }[v.number];
    if ('repeat' in v) return v.repeat.repeat(v.times);
    if ('lone_surrogate' in v) return `${v.lone_surrogate}\uD800`;
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, value(x)]));
  }
  return v;
}

/** Seconds to milliseconds; anything that is not a number (a bad value) passes unchanged. */
const ms = (v) => (typeof v === 'number' ? v * 1000 : v);
// A positional duration is a string with its unit (the table's seconds written `${n}s`); a number
// the table gives that is not finite stays a number, which Node refuses as a bare number.
const dur = (v) => (typeof v === 'number' && Number.isFinite(v) ? `${v}s` : v);

function args(c) {
  if (c.skip && c.skip.node) throw new NotExpressible(c.skip.node);
  return Object.fromEntries(Object.entries(c.args_node || c.args).map(([k, v]) => [k, value(v)]));
}

/** `Backend.redis()` / `Backend.cluster()` options from the table's (Python-named) options. */
function redisOptions(a) {
  const options = {};
  for (const [k, v] of Object.entries(a)) {
    if (k === 'url' || k === 'seeds' || k === 'sentinels' || k === 'service') continue;
    if (k === 'prefix') options.prefix = v;
    else if (k === 'failure_policy') options.failurePolicy = v === 'fallback' ? { fallback: a.fallback_divisor } : v;
    else if (k === 'fallback_divisor') {
      if (a.failure_policy !== 'fallback') throw new NotExpressible('the divisor is part of the fallback policy');
    } else if (k === 'deadline') options.deadlineMs = ms(v);
    else if (k === 'connect_timeout') options.connectTimeoutMs = ms(v);
    else if (k === 'tls_ca_data') options.tls = { ...options.tls, ca: v };
    else if (k === 'tls_cert') options.tls = { ...options.tls, cert: v };
    else if (k === 'replica_acks') options.replicaAcks = v;
    else if (k === 'db') options.db = v;
    else throw new NotExpressible(`Node has no option for ${k}`);
  }
  return options;
}

const freshBackend = () => Backend.memory({ clock: new ManualClock(START_US) });
const pairs = (list) => (Array.isArray(list) ? list.map((x) => (Array.isArray(x) ? x.map(ms) : x)) : list);

/** What peeks of the shared key and of key "k" see: a refused call must not change it. */
function snapshot(limiter) {
  return [null, 'k'].map((key) => {
    const d = limiter.peekSync(key);
    return [d.allowed, d.remaining, d.retryAfterMs];
  });
}

/**
 * The case's calls, each a thunk returning what the call returns (a value or a Promise), and an
 * optional check that nothing was written. Calls with a synchronous and a Promise form give both.
 */
function calls(c) {
  const a = args(c);
  switch (c.call) {
    case 'memory':
      return { thunks: [() => Backend.memory({ maxKeys: a.max_keys })] };
    case 'redis': {
      const options = redisOptions(a);
      return { thunks: [() => Backend.redis(a.url, options)] };
    }
    case 'cluster': {
      const options = redisOptions(a);
      return { thunks: [() => Backend.cluster(a.seeds, options)] };
    }
    case 'sentinel': {
      const options = redisOptions(a);
      return { thunks: [() => Backend.sentinel({ sentinels: a.sentinels, service: a.service, ...options })] };
    }
    case 'bucket':
    case 'window':
      if ('rate' in a) return { thunks: [() => freshBackend()[c.call](a.name, a.rate)] };
      return { thunks: [() => freshBackend()[c.call](a.name, a.limit, dur(a.interval))] };
    case 'windows':
      return {
        thunks: [
          () =>
            freshBackend().windows(
              a.name,
              Array.isArray(a.windows)
                ? a.windows.map(([limit, interval]) => (interval === undefined ? { limit } : { limit, intervalMs: ms(interval) }))
                : a.windows,
            ),
        ],
      };
    case 'sliding_window':
      return { thunks: [() => freshBackend().slidingWindow(a.name, a.limits.map((l) => [dur(l[0]), l[1], ...l.slice(2).map(dur)].slice(0, l.length)))] };
    case 'token_bucket':
      return { thunks: [() => freshBackend().tokenBucket(a.name, a.rate, a.capacity)] };
    case 'leaky':
      return { thunks: [() => freshBackend().leaky(a.name, a.size, dur(a.drain))] };
    case 'points':
      return { thunks: [() => freshBackend().points(a.name, a.capacity, dur(a.refill))] };
    case 'concurrent': {
      const options = {};
      if ('lock_timeout' in a) options.lockTimeoutMs = ms(a.lock_timeout);
      if ('wait_timeout' in a) options.waitTimeoutMs = ms(a.wait_timeout);
      if ('allow_fallback' in a) options.allowFallback = a.allow_fallback;
      return { thunks: [() => freshBackend().concurrent(a.name, a.limit, options)] };
    }
    case 'calendar': {
      const options = {};
      if ('tz' in a) options.tz = a.tz;
      if ('anchor' in a) options.anchor = a.anchor;
      return { thunks: [() => freshBackend().calendar(a.name, a.limit, a.period, options)] };
    }
    case 'unlimited':
      return { thunks: [() => freshBackend().unlimited(a.name)] };
    case 'limiter':
      return { thunks: [() => freshBackend().limiter(a.name, a.spec)] };
    case 'check_all':
      return checkAll(a.parts);
    case 'set_limit':
    case 'clear_limit': {
      const backend = freshBackend();
      const thunk =
        c.call === 'set_limit' ? () => backend.setLimit(a.name, a.spec, a.key) : () => backend.clearLimit(a.name, a.key);
      return {
        thunks: [thunk],
        untouched: async () => {
          for (const info of await backend.limiters()) assert.deepEqual(info.overrides, [], 'a refused call wrote an override');
        },
      };
    }
    case 'backoff': {
      const options = {};
      if ('base' in a) options.baseMs = ms(a.base);
      if ('jitter' in a) options.jitterMs = ms(a.jitter);
      if ('max_reschedules' in a) options.maxReschedules = a.max_reschedules;
      return { thunks: [() => new Backoff(options)] };
    }
    case 'reschedule_in':
      return { thunks: [() => new Backoff().rescheduleIn(a.attempt, ms(a.retry_after))] };
    case 'manual_clock':
      return { thunks: [() => new ManualClock(a.start_us)] };
    case 'advance':
      return { thunks: [() => new ManualClock(START_US).advance(ms(a.seconds))] };
    case 'http_middleware': {
      // Every adapter validates the same options when it is built (see node/http/core.js).
      const backend = freshBackend();
      const options = { ...a.options };
      if (options.limiter !== null && typeof options.limiter === 'object' && !Array.isArray(options.limiter)) {
        options.limiter = backend.limiter('bad-input', options.limiter);
      }
      return {
        thunks: [
          () => require('ratekeeper/express').rateLimit(options),
          () => require('ratekeeper/hono').rateLimiter(options),
          () => require('ratekeeper/nestjs').RateLimit(options),
        ],
      };
    }
    default:
      return limiterCalls(c, a);
  }
}

/** The decision a settle case passes (see the table's `conventions.settle`). */
function settleDecision(c, limiter, which) {
  if (which === 'check') return limiter.checkSync(null, 0);
  if (which === 'peek') return limiter.peekSync(null);
  if (which === 'other_limiter') return freshBackend().limiter('bad-input-other', c.limiter).checkSync(null, 0);
  if (which !== null && typeof which === 'object') return which.value;
  return which;
}

function limiterCalls(c, a) {
  const limiter = freshBackend().limiter('bad-input', c.limiter);
  const before = snapshot(limiter);
  const cost = 'cost' in a ? a.cost : 1;
  const thunks = {
    check: [() => limiter.check(a.key, cost), () => limiter.checkSync(a.key, cost)],
    peek: [() => limiter.peek(a.key), () => limiter.peekSync(a.key)],
    acquire: [() => limiter.acquire(a.key, { cost, waitTimeoutMs: ms(a.wait_timeout) })],
    reset: [() => limiter.reset(a.key)],
    points_used: [() => limiter.pointsUsed(a.key, a.estimate, a.actual)],
    pause: [() => limiter.pause(dur(a.duration), a.key)],
    observe: [() => limiter.observe(a.status, a.headers, a.key, 'max_pause' in a ? { maxPauseMs: ms(a.max_pause) } : undefined)],
    resume: [() => limiter.resume(a.key)],
    within_limit: [
      () => {
        const options = { key: a.key, cost };
        if ('policy' in a) options.policy = a.policy;
        if ('wait_timeout' in a) options.waitTimeoutMs = ms(a.wait_timeout);
        return limiter.withinLimit(() => {
          throw new Error('the block ran');
        }, options);
      },
    ],
    with_wait_timeout: [() => limiter.withWaitTimeout(dur(a.wait_timeout))],
    with_max_pause: [() => limiter.withMaxPause(dur(a.max_pause))],
    block: [() => limiter.block(dur(a.duration), a.key)],
    unblock: [() => limiter.unblock(a.key)],
    with_block_for: [() => limiter.withBlockFor(dur(a.block_for))],
    with_deny_cache: [() => limiter.withDenyCache(a.on)],
    settle: [
      () => limiter.settle(settleDecision(c, limiter, a.decision), a.actual),
      () => limiter.settleSync(settleDecision(c, limiter, a.decision), a.actual),
    ],
    with_shadow: [() => limiter.withShadow(a.shadow)],
  }[c.call];
  assert.ok(thunks, `the table names a call this runner does not know: ${c.call}`);
  return { thunks, untouched: () => assert.deepEqual(snapshot(limiter), before, 'a refused call changed the state') };
}

/**
 * `backend.checkAll` and `acquireAll` with each part's limiter built from its spec on one fresh
 * memory backend (or, with `other_backend`, on another); no part's state may change.
 */
function checkAll(parts) {
  const backend = freshBackend();
  const other = freshBackend();
  const built = parts.map((p, i) => (p.other_backend ? other : backend).limiter(`part${i}`, p.limiter));
  const shaped = parts.map((p, i) => ({ limiter: built[i], key: p.key, cost: p.cost }));
  const before = built.map(snapshot);
  return {
    thunks: [() => backend.checkAll(shaped), () => backend.acquireAll(shaped, { waitTimeoutMs: 0 })],
    untouched: () => assert.deepEqual(built.map(snapshot), before, 'a refused check_all changed a part'),
  };
}

/** Runs a thunk; returns what it threw or rejected with (undefined if it did neither). */
async function failure(thunk) {
  try {
    const result = thunk();
    if (result instanceof Promise) await result;
  } catch (error) {
    return error;
  }
  return undefined;
}

for (const c of TABLE.cases) {
  test(`bad input: ${c.name}`, async (t) => {
    let plan;
    try {
      plan = calls(c);
    } catch (error) {
      if (!(error instanceof NotExpressible)) throw error;
      t.skip(`not expressible in Node: ${error.message}`);
      return;
    }
    const parameter = c.parameter.node;
    for (const thunk of plan.thunks) {
      const error = await failure(thunk);
      assert.ok(error instanceof Error, `expected an error, got ${error}`);
      assert.equal(error.code, CODES[c.error], error.stack);
      assert.equal(error.parameter, parameter, error.message);
      assert.ok(error.message.includes(`\`${parameter}\``), `the message names the parameter: ${error.message}`);
      if (plan.untouched) await plan.untouched();
    }
  });
}
