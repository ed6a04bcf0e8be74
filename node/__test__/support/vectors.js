'use strict';
// Runs the language-neutral conformance vectors (tests/vectors/*.json at the repository root)
// through the Node API, the way core/tests/support/vectors.rs runs them through Rust: each case
// gets a fresh backend whose ManualClock starts at `start_us`; durations (seconds in the
// vectors) are given in milliseconds, the unit of the Node API; errors are compared by `code`
// and by the JavaScript name of the parameter.

const fs = require('node:fs');
const path = require('node:path');
const { ManualClock, Limiter } = require('../..');

const VECTORS_DIR = path.resolve(__dirname, '..', '..', '..', 'tests', 'vectors');
const KINDS = ['concurrent', 'bucket', 'window', 'sliding_window', 'token_bucket', 'leaky', 'points', 'calendar', 'unlimited'];
const MIN_PER_KIND = 15;
const MIN_TOTAL = 120;

/** The error code of each core error kind. */
const CODES = {
  over_limit: 'ERR_OVER_LIMIT',
  shed: 'ERR_SHED',
  lease_lost: 'ERR_LEASE_LOST',
  invalid_argument: 'ERR_INVALID_ARGUMENT',
  backend_unavailable: 'ERR_BACKEND_UNAVAILABLE',
  timeout: 'ERR_TIMEOUT',
};

/**
 * The documented JavaScript name of each core parameter name: an option's duration is in
 * milliseconds (`...Ms`); a positional one (interval, drain, refill, duration) keeps its name.
 */
const JS_PARAMETERS = {
  lock_timeout: 'lockTimeoutMs',
  wait_timeout: 'waitTimeoutMs',
  precision: 'precisionMs',
};
const jsParameter = (name) => JS_PARAMETERS[name] ?? name;

/** A JSON number, or "NaN" / "Infinity" / "-Infinity". */
function number(value) {
  if (typeof value === 'number') return value;
  if (value === 'NaN') return NaN;
  if (value === 'Infinity') return Infinity;
  if (value === '-Infinity') return -Infinity;
  throw new Error(`malformed vector: expected a number, got ${JSON.stringify(value)}`);
}

const ms = (seconds) => number(seconds) * 1000;

// A positional duration: a string with its unit (a number of seconds from a vector becomes
// `${n}s`; one that is not finite stays a bare number, which Node refuses).
function interval(value) {
  if (typeof value === 'string' && !['NaN', 'Infinity', '-Infinity'].includes(value)) return value;
  const seconds = number(value);
  return Number.isFinite(seconds) ? `${seconds}s` : seconds;
}

function buildLimiter(backend, spec) {
  const limiter = buildKind(backend, spec);
  // Shadow mode is an option of every kind: a named constructor's limiter takes it by
  // `withShadow`, a spec as data as a field.
  return spec.shadow === true ? limiter.withShadow(true) : limiter;
}

function buildKind(backend, spec) {
  const { kind, name } = spec;
  // A limiter option (`block_for`, `colocate`) is carried by the spec as data: build it from the data.
  switch ('block_for' in spec || 'colocate' in spec ? '<as data>' : kind) {
    case 'concurrent':
      return backend.concurrent(name, number(spec.limit), { lockTimeoutMs: ms(spec.lock_timeout) });
    case 'bucket':
      return backend.bucket(name, number(spec.limit), interval(spec.interval));
    case 'window':
      if (spec.windows) {
        return backend.windows(name, spec.windows.map((w) => ({ limit: number(w.limit), intervalMs: ms(w.interval) })));
      }
      return backend.window(name, number(spec.limit), interval(spec.interval));
    case 'sliding_window':
      // Tuples: durations as strings with units, as a user writes them.
      return backend.slidingWindow(name, spec.limits.map((l) => [interval(l[0]), number(l[1]), ...l.slice(2).map(interval)]));
    case 'token_bucket':
      return backend.tokenBucket(name, number(spec.rate), number(spec.capacity));
    case 'leaky':
      return backend.leaky(name, number(spec.size), interval(spec.drain));
    case 'points':
      return backend.points(name, number(spec.capacity), interval(spec.refill));
    case 'calendar':
      return backend.calendar(name, number(spec.limit), spec.period, { tz: spec.tz, anchor: spec.anchor });
    case 'unlimited':
      return name == null ? Limiter.unlimited() : backend.unlimited(name);
    default: {
      // Any other kind is built from its spec as data, as the bindings build every kind: a new
      // kind needs no runner code (a misspelt kind is refused by the spec's parser, naming `kind`).
      const { name: _name, ...rest } = spec;
      return backend.limiter(name, rest);
    }
  }
}

const us = (milliseconds) => Math.round(milliseconds * 1000);

function decisionJson(d) {
  const v = {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    retry_after_us: us(d.retryAfterMs),
    reset_after_us: us(d.resetAfterMs),
  };
  if (d.limits) {
    v.limits = d.limits.map((l) => ({
      window_us: us(l.windowMs),
      limit: l.limit,
      remaining: l.remaining,
      retry_after_us: us(l.retryAfterMs),
      reset_after_us: us(l.resetAfterMs),
    }));
  }
  if (d.lease) v.fencing_token = d.lease.fencingToken;
  if (d.shadowRefused) v.shadow_refused = true;
  return v;
}

function normaliseExpect(expect) {
  const v = {
    allowed: expect.allowed,
    limit: expect.limit,
    remaining: expect.remaining,
    retry_after_us: expect.retry_after_us,
    reset_after_us: expect.reset_after_us,
  };
  if (expect.limits) {
    v.limits = expect.limits.map((l) => ({
      window_us: l.window_us,
      limit: l.limit,
      remaining: l.remaining,
      retry_after_us: l.retry_after_us,
      reset_after_us: l.reset_after_us,
    }));
  }
  if ('fencing_token' in expect) v.fencing_token = expect.fencing_token;
  if (expect.shadow_refused === true) v.shadow_refused = true;
  return v;
}

function errorMatches(expected, error) {
  if (!error || error.code !== CODES[expected.kind]) return false;
  if (expected.kind === 'invalid_argument' && !('parameter' in expected)) {
    throw new Error('malformed vector: an invalid_argument expectation must name its `parameter`');
  }
  if (!('parameter' in expected)) return true;
  // `windows` takes its spans as `{ limit, intervalMs }` options: there the interval is `intervalMs`.
  if (expected.parameter === 'interval' && error.parameter === 'intervalMs') return true;
  return error.parameter === jsParameter(expected.parameter);
}

const describeError = (e) => (e && e.code ? `${e.code}${e.parameter ? ` (${e.parameter})` : ''}: ${e.message}` : String(e));

function keyOf(step) {
  const key = step.key;
  if (key == null) return undefined;
  if (typeof key === 'string') return key;
  return key.repeat.repeat(key.times);
}

async function outcomeOf(promise) {
  try {
    return { value: await promise };
  } catch (error) {
    return { error };
  }
}

/** Runs one case; returns its failure messages. */
async function runCase(c, makeBackend) {
  const failures = [];
  const clock = new ManualClock(c.start_us);
  const backend = makeBackend(clock);
  const limiters = new Map();
  let buildError = null;
  for (const [id, spec] of Object.entries(c.limiters)) {
    try {
      limiters.set(id, buildLimiter(backend, spec));
    } catch (error) {
      buildError ??= { id, error };
    }
  }
  if (c.limiter_error) {
    if (!buildError) failures.push(`expected limiter error ${JSON.stringify(c.limiter_error)}, but every limiter was built`);
    else if (!errorMatches(c.limiter_error, buildError.error)) {
      failures.push(`building ${buildError.id}: expected error ${JSON.stringify(c.limiter_error)}, got ${describeError(buildError.error)}`);
    }
    return failures;
  }
  if (buildError) return [`building ${buildError.id}: unexpected error ${describeError(buildError.error)}`];

  const leases = new Map();
  const decisions = new Map(); // saved by `save_decision`, for `settle`
  for (const [index, step] of c.steps.entries()) {
    if (step.op === 'advance') {
      clock.advanceUs(step.us);
      continue;
    }
    if (step.op === 'check_all') {
      const fail = (message) => failures.push(`step ${index} (check_all): ${message}`);
      await checkAllStep(backend, limiters, step, index, leases, fail);
      continue;
    }
    const limiter = limiters.get(step.limiter);
    if (!limiter) throw new Error(`malformed vector: step ${index}: unknown limiter ${step.limiter}`);
    const key = keyOf(step);
    let outcome;
    switch (step.op) {
      case 'check':
        outcome = await outcomeOf(limiter.check(key, 'cost' in step ? number(step.cost) : undefined));
        break;
      case 'peek':
        outcome = await outcomeOf(limiter.peek(key));
        break;
      case 'reset':
        outcome = await outcomeOf(limiter.reset(key));
        break;
      case 'points_used':
        outcome = await outcomeOf(limiter.pointsUsed(key, number(step.estimate), number(step.actual)));
        break;
      case 'block':
        outcome = await outcomeOf(limiter.block(interval(step.seconds), key).then(() => undefined));
        break;
      case 'unblock':
        outcome = await outcomeOf(limiter.unblock(key).then(() => undefined));
        break;
      case 'release': {
        const lease = leases.get(step.lease);
        if (!lease) throw new Error(`malformed vector: step ${index}: no lease saved as ${step.lease}`);
        outcome = await outcomeOf(limiter.release({ ...lease, key }));
        break;
      }
      case 'settle': {
        if (!decisions.has(step.decision)) throw new Error(`malformed vector: step ${index}: no decision saved as ${step.decision}`);
        outcome = await outcomeOf(limiter.settle(decisions.get(step.decision), number(step.actual)));
        break;
      }
      default:
        throw new Error(`malformed vector: step ${index}: unknown op ${step.op}`);
    }
    const fail = (message) => failures.push(`step ${index} (${step.op} on ${step.limiter}): ${message}`);
    if (step.error) {
      if (!('error' in outcome)) fail(`expected error ${JSON.stringify(step.error)}, got success ${JSON.stringify(outcome.value)}`);
      else if (!errorMatches(step.error, outcome.error)) fail(`expected error ${JSON.stringify(step.error)}, got ${describeError(outcome.error)}`);
      continue;
    }
    if ('error' in outcome) {
      fail(`expected success, got ${describeError(outcome.error)}`);
      continue;
    }
    if (!step.expect) continue;
    const d = outcome.value;
    const expected = normaliseExpect(step.expect);
    const actual = decisionJson(d);
    const wantsLease = step.op === 'check' && limiter.kind === 'concurrent' && d.allowed && !d.shadowRefused;
    if (Boolean(d.lease) !== wantsLease) fail(`lease present: ${Boolean(d.lease)}, expected ${wantsLease}`);
    if (!('fencing_token' in expected) || step.op !== 'check') delete actual.fencing_token;
    if (JSON.stringify(actual) !== JSON.stringify(expected)) {
      fail(`expected ${JSON.stringify(expected)}\n         actual   ${JSON.stringify(actual)}`);
    }
    // Saved as stored data would be (a decision is a plain value: its ticket survives JSON).
    if (step.save_decision) decisions.set(step.save_decision, JSON.parse(JSON.stringify(d)));
    if (step.save_lease) {
      if (d.lease) leases.set(step.save_lease, d.lease);
      else fail(`expected a lease to save as ${step.save_lease}, got none`);
    }
  }
  return failures;
}

/**
 * A `check_all` step: `parts` (each `{limiter, key, cost}`), then `expect` (`allowed`,
 * `retry_after_us` and one decision per part) or `error`. Admitted concurrent parts hold
 * leases, saved (in order) under the names of `save_leases` when given.
 */
async function checkAllStep(backend, limiters, step, index, leases, fail) {
  const parts = step.parts.map((part) => {
    const limiter = limiters.get(part.limiter);
    if (!limiter) throw new Error(`malformed vector: step ${index}: unknown limiter ${part.limiter}`);
    return { limiter, key: keyOf(part), cost: 'cost' in part ? number(part.cost) : undefined };
  });
  const outcome = await outcomeOf(backend.checkAll(parts));
  if (step.error) {
    if (!('error' in outcome)) fail(`expected error ${JSON.stringify(step.error)}, got allowed: ${outcome.value.allowed}`);
    else if (!errorMatches(step.error, outcome.error)) fail(`expected error ${JSON.stringify(step.error)}, got ${describeError(outcome.error)}`);
    return;
  }
  if ('error' in outcome) {
    fail(`expected success, got ${describeError(outcome.error)}`);
    return;
  }
  if (!step.expect) throw new Error(`malformed vector: step ${index}: \`check_all\` needs an \`expect\` or an \`error\``);
  const combined = outcome.value;
  const { allowed, retry_after_us: retry } = step.expect;
  if (combined.allowed !== allowed || us(combined.retryAfterMs) !== retry) {
    fail(`expected allowed ${allowed}, retry_after_us ${retry}; got ${combined.allowed}, ${us(combined.retryAfterMs)}`);
  }
  if (step.expect.parts.length !== combined.parts.length) {
    throw new Error(`malformed vector: step ${index}: expect one decision per part`);
  }
  const saved = [];
  combined.parts.forEach((part, i) => {
    const expected = normaliseExpect(step.expect.parts[i]);
    const actual = decisionJson(part.decision);
    const wantsLease = combined.allowed && part.limiter.kind === 'concurrent';
    if (Boolean(part.decision.lease) !== wantsLease) {
      fail(`parts[${i}]: lease present: ${Boolean(part.decision.lease)}, expected ${wantsLease}`);
    }
    if (!('fencing_token' in expected)) delete actual.fencing_token;
    if (JSON.stringify(actual) !== JSON.stringify(expected)) {
      fail(`parts[${i}]: expected ${JSON.stringify(expected)}\n         actual   ${JSON.stringify(actual)}`);
    }
    if (part.decision.lease) saved.push(part.decision.lease);
  });
  if (step.save_leases) {
    if (step.save_leases.length !== saved.length) fail(`expected ${step.save_leases.length} leases to save, got ${saved.length}`);
    step.save_leases.forEach((name, i) => saved[i] && leases.set(name, saved[i]));
  }
}

/**
 * Runs every vector against backends from `makeBackend(clock)`; returns the summary and the
 * failures (file / case / message), and throws on malformed vectors.
 */
async function runConformance(makeBackend) {
  // Vectors of calls not every binding has yet live in subdirectories (`check_all/`).
  const files = [
    ...fs.readdirSync(VECTORS_DIR).filter((f) => f.endsWith('.json')).sort(),
    ...fs.readdirSync(path.join(VECTORS_DIR, 'check_all')).filter((f) => f.endsWith('.json')).sort().map((f) => path.join('check_all', f)),
  ];
  const perKind = Object.fromEntries(KINDS.map((k) => [k, 0]));
  const failures = [];
  let total = 0;
  for (const file of files) {
    const doc = JSON.parse(fs.readFileSync(path.join(VECTORS_DIR, file), 'utf8'));
    for (const c of doc.cases) {
      total += 1;
      for (const kind of new Set(Object.values(c.limiters).map((l) => l.kind))) perKind[kind] = (perKind[kind] ?? 0) + 1;
      for (const message of await runCase(c, makeBackend)) failures.push(`${file} / ${c.name} / ${message}`);
    }
  }
  const problems = [...failures];
  if (total < MIN_TOTAL) problems.push(`only ${total} vector cases; at least ${MIN_TOTAL} are required`);
  // The minimum holds for the kinds every vector file covers (a kind seen only as a bad part of
  // a combination, e.g. `leased`, is not one of them).
  for (const kind of KINDS) {
    const n = perKind[kind];
    if (n < MIN_PER_KIND) problems.push(`only ${n} cases exercise ${kind}; at least ${MIN_PER_KIND} are required`);
  }
  return { total, perKind, problems };
}

module.exports = { runConformance, jsParameter };
