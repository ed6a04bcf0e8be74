'use strict';
// ratekeeper for Node: the native addon (Rust core, napi-rs) plus the few helpers that need
// JavaScript: AbortSignal support for `acquire`, `withinLimit` (which runs your callback),
// `FleetShedder#run`, and the HTTP header helpers in http.js.

const native = require('./addon.js');
const http = require('./http.js');

const { Limiter, FleetShedder, newCanceller, cancel } = native;

/** What `withinLimit` resolves with when `policy: 'ignore'` skipped the block. */
const SKIPPED = Symbol.for('ratekeeper.skipped');

/** Every `code` a ratekeeper error carries. */
const codes = Object.freeze({
  OVER_LIMIT: 'ERR_OVER_LIMIT',
  SHED: 'ERR_SHED',
  LEASE_LOST: 'ERR_LEASE_LOST',
  INVALID_ARGUMENT: 'ERR_INVALID_ARGUMENT',
  BACKEND_UNAVAILABLE: 'ERR_BACKEND_UNAVAILABLE',
  TIMEOUT: 'ERR_TIMEOUT',
  BACKEND_REJECTED: 'ERR_BACKEND_REJECTED',
  RATEKEEPER: 'ERR_RATEKEEPER',
  INTERNAL: 'ERR_INTERNAL',
});
const knownCodes = new Set(Object.values(codes));

/** Whether `error` came from ratekeeper (an `Error` with one of `codes`). */
function isRatekeeperError(error) {
  return error instanceof Error && knownCodes.has(error.code);
}

/** An invalid-argument error of the JavaScript layer, shaped like the core's. */
function invalidArgument(parameter, message) {
  const error = new Error(`invalid argument \`${parameter}\`: ${message}`);
  error.code = codes.INVALID_ARGUMENT;
  error.parameter = parameter;
  return error;
}

/**
 * Refuses an options object holding a property not in `known`: a misspelt option would
 * otherwise be ignored and its default used. The JavaScript layer's form of the native check
 * (node/src/options.rs), with the same error.
 */
function refuseUnknownOptions(options, known) {
  if (options == null) return;
  if (typeof options !== 'object') {
    throw invalidArgument('options', `must be an object, got ${Array.isArray(options) ? 'an array' : typeof options}`);
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw invalidArgument(key, `is not an option; the options are ${known.join(', ')}`);
  }
}

/** The rejection of an aborted wait, as Node's own APIs make it. */
function abortError(signal) {
  const error = new Error('The operation was aborted', { cause: signal.reason });
  error.name = 'AbortError';
  error.code = 'ABORT_ERR';
  return error;
}

function isAbortSignal(signal) {
  return (
    signal !== null &&
    typeof signal === 'object' &&
    typeof signal.aborted === 'boolean' &&
    typeof signal.addEventListener === 'function' &&
    typeof signal.removeEventListener === 'function'
  );
}

// ---- results (see node/src/bridge.rs): a native call returns `undefined` (a plain decision in
// `syncOut`), `null` (nothing), an object (the result), or a number (the id of a call still
// running, settled later by `onSettled` from the `records` buffer).

const RECORD = 8;
const CAPACITY = 512;
const records = new Float64Array(RECORD * CAPACITY);
const syncOut = new Float64Array(6);
const running = new Map();

function onSettled(count, values) {
  let v = 0;
  for (let i = 0; i < count; i++) {
    const o = i * RECORD;
    const id = records[o];
    const kind = records[o + 1];
    const settle = running.get(id);
    running.delete(id);
    if (settle === undefined) continue;
    if (kind === 0) {
      settle.resolve({
        allowed: records[o + 2] === 1,
        limit: records[o + 3],
        remaining: records[o + 4],
        retryAfterMs: records[o + 5],
        resetAfterMs: records[o + 6],
        decidedAtUs: records[o + 7],
        shadowRefused: false,
      });
    } else if (kind === 1) settle.resolve(value(values[v++]));
    else if (kind === 2) settle.reject(values[v++]);
    else settle.resolve(undefined);
  }
}

native.initBridge(onSettled, records, syncOut);

function syncDecision() {
  return {
    allowed: syncOut[0] === 1,
    limit: syncOut[1],
    remaining: syncOut[2],
    retryAfterMs: syncOut[3],
    resetAfterMs: syncOut[4],
    decidedAtUs: syncOut[5],
    shadowRefused: false,
  };
}

/** The public value of a synchronous native result. */
function value(result) {
  if (result === undefined) return syncDecision();
  if (result === null) return undefined;
  if (result === false) return null; // a critical request's fleet ticket
  return result;
}

/** A Promise of a native result. */
function promised(result) {
  if (typeof result === 'number') {
    return new Promise((resolve, reject) => running.set(result, { resolve, reject }));
  }
  return Promise.resolve(value(result));
}

/** Wraps a native method that returns a result into one that returns a Promise. */
function async0(method) {
  return function () {
    try {
      return promised(method.call(this));
    } catch (error) {
      return Promise.reject(error);
    }
  };
}
function async1(method) {
  return function (a) {
    try {
      return promised(method.call(this, a));
    } catch (error) {
      return Promise.reject(error);
    }
  };
}
function async2(method) {
  return function (a, b) {
    try {
      return promised(method.call(this, a, b));
    } catch (error) {
      return Promise.reject(error);
    }
  };
}
function async3(method) {
  return function (a, b, c) {
    try {
      return promised(method.call(this, a, b, c));
    } catch (error) {
      return Promise.reject(error);
    }
  };
}
function sync2(method) {
  return function (a, b) {
    return value(method.call(this, a, b));
  };
}

const L = Limiter.prototype;
const nativeAcquire = L.acquire;

function acquire(key, options) {
  const signal = options == null ? undefined : options.signal;
  let result;
  if (signal == null) {
    try {
      result = nativeAcquire.call(this, key, options);
    } catch (error) {
      return Promise.reject(error);
    }
    return promised(result);
  }
  if (!isAbortSignal(signal)) {
    return Promise.reject(invalidArgument('signal', 'must be an AbortSignal'));
  }
  if (signal.aborted) return Promise.reject(abortError(signal));
  const canceller = newCanceller();
  try {
    result = nativeAcquire.call(this, key, options, canceller);
  } catch (error) {
    return Promise.reject(error);
  }
  if (typeof result !== 'number') return promised(result);
  const onAbort = () => cancel(canceller);
  signal.addEventListener('abort', onAbort, { once: true });
  return promised(result).then(
    (decision) => {
      signal.removeEventListener('abort', onAbort);
      return decision;
    },
    (error) => {
      signal.removeEventListener('abort', onAbort);
      throw signal.aborted ? abortError(signal) : error;
    },
  );
}

const WITHIN_LIMIT_OPTIONS = ['key', 'cost', 'policy', 'waitTimeoutMs', 'signal'];

async function withinLimit(fn, options) {
  if (typeof fn !== 'function') throw invalidArgument('fn', 'must be a function');
  refuseUnknownOptions(options, WITHIN_LIMIT_OPTIONS);
  const { key, cost, policy = 'raise', waitTimeoutMs, signal } = options ?? {};
  if (policy !== 'raise' && policy !== 'ignore') {
    throw invalidArgument('policy', `must be 'raise' or 'ignore', got ${String(policy)}`);
  }
  let decision;
  try {
    decision = await this.acquire(key, { cost, waitTimeoutMs, signal });
  } catch (error) {
    if (policy === 'ignore' && error && error.code === codes.OVER_LIMIT) return SKIPPED;
    throw error;
  }
  const estimate = cost ?? 1;
  // A permit reports its cost once. The report is claimed before the call, so one whose answer
  // was lost (it may have been applied) is never made twice; one refused as invalid (nothing
  // was written) may be made again.
  let reported = false;
  const permit = Object.freeze({
    decision,
    pointsUsed: (actual) => {
      if (reported) {
        return Promise.reject(invalidArgument('actual', 'pointsUsed was already reported for this permit'));
      }
      reported = true;
      return this.pointsUsed(key, estimate, actual).catch((error) => {
        if (error && error.code === codes.INVALID_ARGUMENT) reported = false;
        throw error;
      });
    },
  });
  let result;
  try {
    result = await fn(permit);
  } catch (error) {
    // The block's error wins over a failed release (e.g. a lease reclaimed meanwhile).
    if (decision.lease) await this.release(decision.lease).catch(() => {});
    throw error;
  }
  if (decision.lease) await this.release(decision.lease);
  return result;
}

// Upstream feedback: `observe` accepts the headers of any HTTP client and hands the native call
// `[name, value]` pairs (the parsing of their values is the core's).
const nativeObservePairs = L.observePairs;

/** Response headers as `[name, value]` pairs: a fetch `Response` (its headers), a `Headers`
 * instance or a `Map` (anything with `forEach(value, name)`), an array of pairs, or a plain
 * object such as Node's `IncomingHttpHeaders` (an array value gives one pair per element). */
function headerPairs(headers) {
  if (headers === null || typeof headers !== 'object') {
    throw invalidArgument('headers', 'must be an object, a Headers, a Map, a Response or an array of [name, value] pairs');
  }
  if (Array.isArray(headers)) return headers;
  if (isResponse(headers)) return headerPairs(headers.headers);
  const pairs = [];
  if (typeof headers.forEach === 'function') {
    headers.forEach((value, name) => pairs.push([name, value]));
    return pairs;
  }
  for (const [name, value] of Object.entries(headers)) {
    if (Array.isArray(value)) for (const v of value) pairs.push([name, v]);
    else if (value !== undefined) pairs.push([name, value]);
  }
  return pairs;
}

function isResponse(response) {
  return (
    response !== null &&
    typeof response === 'object' &&
    typeof response.status === 'number' &&
    response.headers !== null &&
    typeof response.headers === 'object'
  );
}

function observe(status, headers, key, options) {
  try {
    refuseUnknownOptions(options, ['maxPauseMs']);
    const maxPauseMs = options == null ? undefined : options.maxPauseMs;
    return promised(nativeObservePairs.call(this, status, headerPairs(headers), key, maxPauseMs));
  } catch (error) {
    return Promise.reject(error);
  }
}

function observeResponse(response, key, options) {
  if (!isResponse(response)) {
    return Promise.reject(invalidArgument('response', 'must be a Response (with a numeric status and headers)'));
  }
  return observe.call(this, response.status, response.headers, key, options);
}

// `resume` settles with 1 or 0 (a native `false` reads as "nothing"): a boolean here.
const nativeResume = L.resume;
function resume(key) {
  try {
    return promised(nativeResume.call(this, key)).then((ended) => ended === 1);
  } catch (error) {
    return Promise.reject(error);
  }
}

async function run(fn, options) {
  if (typeof fn !== 'function') throw invalidArgument('fn', 'must be a function');
  refuseUnknownOptions(options, ['critical']);
  const ticket = await this.enter(Boolean(options && options.critical));
  try {
    return await fn();
  } finally {
    await this.leave(ticket);
  }
}

// The hot calls go to module functions by the limiter's number (see `HANDLES` in
// node/src/limiter.rs), which spares each call napi's unwrapping of `this`.
const HANDLE = Symbol('ratekeeper.handle');
const nativeHandle = L.handle;
function handle(limiter) {
  const h = limiter[HANDLE];
  return h !== undefined ? h : (limiter[HANDLE] = nativeHandle.call(limiter));
}
const { limiterCheck, limiterCheckSync, limiterPeek, limiterPeekSync } = native;

function check(key, cost) {
  try {
    return promised(limiterCheck(handle(this), key, cost));
  } catch (error) {
    return Promise.reject(error);
  }
}
function checkSync(key, cost) {
  return value(limiterCheckSync(handle(this), key, cost));
}
function peek(key) {
  try {
    return promised(limiterPeek(handle(this), key));
  } catch (error) {
    return Promise.reject(error);
  }
}
function peekSync(key) {
  return value(limiterPeekSync(handle(this), key));
}

const F = FleetShedder.prototype;
for (const [target, name, method] of [
  [L, 'check', check],
  [L, 'checkSync', checkSync],
  [L, 'peek', peek],
  [L, 'peekSync', peekSync],
  [L, 'acquire', acquire],
  [L, 'reset', async1(L.reset)],
  [L, 'close', async0(L.close)],
  [L, 'release', async1(L.release)],
  [L, 'extend', async1(L.extend)],
  [L, 'pointsUsed', async3(L.pointsUsed)],
  [L, 'fleetMetrics', async0(L.fleetMetrics)],
  [L, 'withinLimit', withinLimit],
  [L, 'pause', async2(L.pause)],
  [L, 'observe', observe],
  [L, 'observeResponse', observeResponse],
  [L, 'resume', resume],
  [F, 'enter', async1(F.enter)],
  [F, 'leave', async1(F.leave)],
  [F, 'run', run],
]) {
  Object.defineProperty(target, name, { value: method, writable: true, configurable: true, enumerable: false });
}

// Specs as data: `backend.limiter(name, spec)` takes the spec as an object or as JSON text
// (durations in seconds, as in every language); `limiter.spec` reads it back as an object.
const B = native.Backend.prototype;
function limiter(name, spec) {
  if (typeof spec === 'string') return this.limiterFromJson(name, spec);
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
    throw invalidArgument('spec', 'must be an object or a JSON string');
  }
  return this.limiterFromJson(name, JSON.stringify(spec));
}
Object.defineProperty(B, 'limiter', { value: limiter, writable: true, configurable: true, enumerable: false });

// Operating it: the registry, live limits, metrics and the Prometheus exposition. Registry and
// metrics results cross as JSON text and are parsed here.
native.setClientLanguage(`node ${process.versions.node}`);
function specText(spec) {
  if (typeof spec === 'string') return spec;
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
    throw invalidArgument('spec', 'must be an object or a JSON string');
  }
  return JSON.stringify(spec);
}
/** Reads `{ fleet }`, refusing any other option. */
function fleetOption(options) {
  if (options == null) return false;
  if (typeof options !== 'object') throw invalidArgument('options', 'must be an object');
  for (const name of Object.keys(options)) {
    if (name !== 'fleet') throw invalidArgument(name, `is not an option (known: fleet)`);
  }
  return Boolean(options.fleet);
}
const limitersJson = async0(B.limitersJson);
const setLimitJson = async3(B.setLimitJson);
const metricsJson = async1(B.metricsJson);
const prometheusText = async1(B.prometheusText);
for (const [name, method] of [
  ['limiters', async function () {
    return JSON.parse(await limitersJson.call(this));
  }],
  ['setLimit', function (name, spec, key) {
    let json;
    try {
      json = specText(spec);
    } catch (error) {
      return Promise.reject(error);
    }
    return setLimitJson.call(this, name, json, key);
  }],
  ['clearLimit', async2(B.clearLimit)],
  ['flush', async0(B.flush)],
  ['metrics', async function (options) {
    return JSON.parse(await metricsJson.call(this, fleetOption(options)));
  }],
  ['prometheus', async function (options) {
    return prometheusText.call(this, fleetOption(options));
  }],
]) {
  Object.defineProperty(B, name, { value: method, writable: true, configurable: true, enumerable: false });
}
Object.defineProperty(L, 'spec', {
  get() {
    return JSON.parse(this.specJson);
  },
  configurable: true,
  enumerable: false,
});

module.exports = {
  Backend: native.Backend,
  Limiter,
  Backoff: native.Backoff,
  ManualClock: native.ManualClock,
  FleetShedder,
  UtilizationShedder: native.UtilizationShedder,
  coreVersion: native.coreVersion,
  SKIPPED,
  codes,
  isRatekeeperError,
  ...http,
};
