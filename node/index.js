'use strict';
// ratekeeper for Node: the public classes `Backend`, `Limiter` and `FleetShedder`, written here
// in JavaScript over the native addon (Rust core, napi-rs), whose classes are `NativeBackend`,
// `NativeLimiter` and `NativeFleetShedder` (native.d.ts). A public method calls its native
// counterpart and turns the native reply into the public value (a Promise, a decision); what
// needs JavaScript lives here too: AbortSignal support for `acquire`, `withinLimit` (which runs
// your callback), `FleetShedder#run`, specs as objects, and the HTTP header helpers in http.js.

const native = require('./addon.js');
const http = require('./http.js');

const { NativeBackend, NativeLimiter, NativeFleetShedder, newCanceller, cancel } = native;

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

const RECORD = 11;
const CAPACITY = 512;
const records = new Float64Array(RECORD * CAPACITY);
const syncOut = new Float64Array(9);
const running = new Map();

/** Whether `ticket` is a SettleTicket this process issued (not one rebuilt from JSON). */
let issuedHere;

/**
 * A settle ticket this process issued: `{ id, limiter, cost, chargedAtUs, key }`, read by
 * `limiter.settle`. Its JSON form (`JSON.stringify`) adds a `seal` made by the limiter that
 * issued it: a ticket that comes back from outside the process (a job, a queue message) is
 * settled only with its seal, and only if no field was changed.
 */
class SettleTicket {
  #owner;

  constructor(id, limiter, cost, chargedAtUs, key, owner) {
    this.id = id;
    this.limiter = limiter;
    this.cost = cost;
    this.chargedAtUs = chargedAtUs;
    this.key = key;
    this.#owner = owner;
  }

  toJSON() {
    const { id, limiter, cost, chargedAtUs, key } = this;
    return { id, limiter, cost, chargedAtUs, key, seal: this.#owner.sealTicket(this) };
  }

  static {
    issuedHere = (ticket) => ticket !== null && typeof ticket === 'object' && #owner in ticket;
  }
}
/** Whether `decision`'s ticket must show its seal to be settled: it was not issued here. */
function needsSeal(decision) {
  return !(decision !== null && typeof decision === 'object' && issuedHere(decision.settle));
}

/** `result` (a native object result) with its plain settle ticket issued by `owner`. */
function withTicket(result, owner) {
  const t = result.settle;
  if (t != null && owner !== undefined && !issuedHere(t)) {
    result.settle = new SettleTicket(t.id, t.limiter, t.cost, t.chargedAtUs, t.key, owner);
  }
  return result;
}

/**
 * A plain decision from `buffer` at offset `o` (six fields, then its settle ticket's id,
 * limiter and cost; id 0: none, `settle` is then undefined). The ticket's key is the call's:
 * `key` (absent for the limiter's shared key); `owner` the native limiter that issued it.
 */
function plainDecision(buffer, o, key, owner) {
  const id = buffer[o + 6];
  return {
    allowed: buffer[o] === 1,
    limit: buffer[o + 1],
    remaining: buffer[o + 2],
    retryAfterMs: buffer[o + 3],
    resetAfterMs: buffer[o + 4],
    decidedAtUs: buffer[o + 5],
    settle:
      id === 0
        ? undefined
        : new SettleTicket(id, buffer[o + 7], buffer[o + 8], buffer[o + 5], key == null ? undefined : key, owner),
    shadowRefused: false,
  };
}

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
      settle.resolve(plainDecision(records, o + 2, settle.key, settle.owner));
    } else if (kind === 1) settle.resolve(value(values[v++], settle.key, settle.owner));
    else if (kind === 2) settle.reject(values[v++]);
    else settle.resolve(undefined);
  }
}

native.initBridge(onSettled, records, syncOut);

/**
 * The public value of a synchronous native result (`key`: the call's, for a settle ticket;
 * `owner`: the native limiter of a call whose decision may carry one).
 */
function value(result, key, owner) {
  if (result === undefined) return plainDecision(syncOut, 0, key, owner);
  if (result === null) return undefined;
  if (result === false) return null; // a critical request's fleet ticket
  return owner === undefined ? result : withTicket(result, owner);
}

/** A Promise of a native result (`key`, `owner`: as for `value`). */
function promised(result, key, owner) {
  if (typeof result === 'number') {
    lastCallId = result;
    return new Promise((resolve, reject) => running.set(result, { resolve, reject, key, owner }));
  }
  return Promise.resolve(value(result, key, owner));
}

/** A Promise of what `call` returns natively: a throw becomes a rejection. */
function promisedCall(call) {
  try {
    return promised(call());
  } catch (error) {
    return Promise.reject(error);
  }
}

const WITHIN_LIMIT_OPTIONS = ['key', 'cost', 'policy', 'waitTimeoutMs', 'signal'];

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

/** The text of a spec given as an object or as JSON text. */
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

// The public classes are built around a native object by this module only: their constructors
// take this token (a user's `new Limiter()` has none).
const WRAP = Symbol('ratekeeper.wrap');
function noConstructor(name, how) {
  return new TypeError(`${name} has no public constructor: ${how}`);
}

// The hot calls go to module functions by the limiter's number (see `HANDLES` in
// node/src/limiter.rs), which spares each call napi's unwrapping of `this`.
const HANDLE = Symbol('ratekeeper.handle');
const { limiterCheck, limiterCheckSync, limiterPeek, limiterPeekSync } = native;

/**
 * `ratekeeper/otel`'s tracing of a limiter's `check`, `checkSync`, `acquire`, `peek`, `peekSync`,
 * `settle`, `settleSync` and `release`, and a backend's `checkAll` and `acquireAll`: null until a
 * backend is traced (a call then pays this one comparison), else `(target, method, ...args)`,
 * which makes the call's span around `untraced(target, method, args)`. Set through `TRACING` (otel.js).
 */
let tracing = null;
/** The id of the last call that returned a Promise waiting on the native side (see `untraced`). */
let lastCallId;

/**
 * Makes a call with tracing off (a native call starts synchronously, so this covers it); a
 * traced call's (`roundTrips`) Redis round trips made on the runtime or on this thread are noted
 * natively meanwhile (see node/src/trace.rs).
 */
function untraced(target, method, args, roundTrips = false) {
  const saved = tracing;
  tracing = null;
  lastCallId = undefined;
  if (roundTrips) native.traceRoundTrips(true);
  try {
    return target[method](...args);
  } finally {
    tracing = saved;
    if (roundTrips) native.traceRoundTrips(false);
  }
}

/** Where otel.js reaches `tracing` (not part of the public API). */
const TRACING = Symbol.for('ratekeeper.tracing');

/** The native object of a public `Backend` (anything else is passed on for the native check). */
let nativeBackendOf;
/** The handle of a public `Limiter`; undefined for anything else. */
let limiterHandleOf;
/** The native limiter of a Limiter (undefined for anything else). */
let nativeLimiterOf;

/**
 * A rate limiter bound to a backend; build it with a `Backend` method. Every call takes an
 * optional `key` (any string up to 1 KiB, e.g. a user id): one limiter serves many identities.
 */
class Limiter {
  #native;

  constructor(token, nativeLimiter) {
    if (token !== WRAP) throw noConstructor('Limiter', 'build one with a Backend method, or Limiter.unlimited()');
    this.#native = nativeLimiter;
    // Its number for the by-handle calls, registered on first use.
    this[HANDLE] = 0;
  }

  #handle() {
    const h = this[HANDLE];
    return h !== 0 ? h : (this[HANDLE] = this.#native.handle());
  }

  static {
    limiterHandleOf = (limiter) => (limiter !== null && typeof limiter === 'object' && #native in limiter ? limiter.#handle() : undefined);
    nativeLimiterOf = (limiter) => (limiter !== null && typeof limiter === 'object' && #native in limiter ? limiter.#native : undefined);
  }

  /** A limiter that always allows and touches no backend (admins, tests). */
  static unlimited() {
    return new Limiter(WRAP, NativeLimiter.unlimited());
  }

  get name() {
    return this.#native.name;
  }
  get kind() {
    return this.#native.kind;
  }
  /** Its backend's `id`. */
  get backendId() {
    return this.#native.backendId;
  }
  get specJson() {
    return this.#native.specJson;
  }
  /** The limiter's spec as data, in the canonical form every language reads back. */
  get spec() {
    return JSON.parse(this.#native.specJson);
  }
  get allowsFallback() {
    return this.#native.allowsFallback;
  }
  get capacity() {
    return this.#native.capacity;
  }
  get refundable() {
    return this.#native.refundable;
  }
  get windowMs() {
    return this.#native.windowMs;
  }
  get waitTimeoutMs() {
    return this.#native.waitTimeoutMs;
  }
  get maxPauseMs() {
    return this.#native.maxPauseMs;
  }
  get blockForMs() {
    return this.#native.blockForMs;
  }
  get shadow() {
    return this.#native.shadow;
  }

  withMaxPause(maxPause) {
    return new Limiter(WRAP, this.#native.withMaxPause(maxPause));
  }
  withWaitTimeout(waitTimeout) {
    return new Limiter(WRAP, this.#native.withWaitTimeout(waitTimeout));
  }
  withBlockFor(blockFor) {
    return new Limiter(WRAP, this.#native.withBlockFor(blockFor));
  }
  withShadow(shadow) {
    return new Limiter(WRAP, this.#native.withShadow(shadow));
  }
  get denyCache() {
    return this.#native.denyCache;
  }
  withDenyCache(on) {
    return new Limiter(WRAP, this.#native.withDenyCache(on));
  }

  check(key, cost) {
    if (tracing !== null) return tracing(this, 'check', key, cost);
    try {
      return promised(limiterCheck(this.#handle(), key, cost), key, this.#native);
    } catch (error) {
      return Promise.reject(error);
    }
  }
  checkSync(key, cost) {
    if (tracing !== null) return tracing(this, 'checkSync', key, cost);
    return value(limiterCheckSync(this.#handle(), key, cost), key, this.#native);
  }
  peek(key) {
    if (tracing !== null) return tracing(this, 'peek', key);
    try {
      return promised(limiterPeek(this.#handle(), key));
    } catch (error) {
      return Promise.reject(error);
    }
  }
  peekSync(key) {
    if (tracing !== null) return tracing(this, 'peekSync', key);
    return value(limiterPeekSync(this.#handle(), key));
  }

  acquire(key, options) {
    if (tracing !== null) return tracing(this, 'acquire', key, options);
    const signal = options == null ? undefined : options.signal;
    let result;
    if (signal == null) {
      try {
        result = this.#native.acquire(key, options);
      } catch (error) {
        return Promise.reject(error);
      }
      return promised(result, key, this.#native);
    }
    if (!isAbortSignal(signal)) {
      return Promise.reject(invalidArgument('signal', 'must be an AbortSignal'));
    }
    if (signal.aborted) return Promise.reject(abortError(signal));
    const canceller = newCanceller();
    try {
      result = this.#native.acquire(key, options, canceller);
    } catch (error) {
      return Promise.reject(error);
    }
    if (typeof result !== 'number') return promised(result, key, this.#native);
    const onAbort = () => cancel(canceller);
    signal.addEventListener('abort', onAbort, { once: true });
    return promised(result, key, this.#native).then(
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

  reset(key) {
    return promisedCall(() => this.#native.reset(key));
  }
  close() {
    return promisedCall(() => this.#native.close());
  }
  partitionsHeld(key) {
    return this.#native.partitionsHeld(key);
  }
  release(lease) {
    if (tracing !== null) return tracing(this, 'release', lease);
    return promisedCall(() => this.#native.release(lease));
  }
  extend(lease) {
    return promisedCall(() => this.#native.extend(lease));
  }
  pointsUsed(key, estimate, actual) {
    return promisedCall(() => this.#native.pointsUsed(key, estimate, actual));
  }
  settle(decision, actual) {
    if (tracing !== null) return tracing(this, 'settle', decision, actual);
    return promisedCall(() => this.#native.settle(decision, actual, needsSeal(decision)));
  }
  settleSync(decision, actual) {
    if (tracing !== null) return tracing(this, 'settleSync', decision, actual);
    return value(this.#native.settleSync(decision, actual, needsSeal(decision)));
  }
  pause(duration, key) {
    return promisedCall(() => this.#native.pause(duration, key));
  }
  /** Resolves with whether a pause was in effect (the native reply is 1 or 0). */
  resume(key) {
    return promisedCall(() => this.#native.resume(key)).then((ended) => ended === 1);
  }
  block(duration, key) {
    return promisedCall(() => this.#native.block(duration, key));
  }
  /** Resolves with whether a block was in effect (the native reply is 1 or 0). */
  unblock(key) {
    return promisedCall(() => this.#native.unblock(key)).then((ended) => ended === 1);
  }
  metrics() {
    return this.#native.metrics();
  }
  fleetMetrics() {
    return promisedCall(() => this.#native.fleetMetrics());
  }

  // Upstream feedback: `observe` accepts the headers of any HTTP client and hands the native
  // call `[name, value]` pairs (the parsing of their values is the core's).
  observe(status, headers, key, options) {
    return promisedCall(() => {
      refuseUnknownOptions(options, ['maxPauseMs']);
      const maxPauseMs = options == null ? undefined : options.maxPauseMs;
      return this.#native.observePairs(status, headerPairs(headers), key, maxPauseMs);
    });
  }
  observeResponse(response, key, options) {
    if (!isResponse(response)) {
      return Promise.reject(invalidArgument('response', 'must be a Response (with a numeric status and headers)'));
    }
    return this.observe(response.status, response.headers, key, options);
  }

  async withinLimit(fn, options) {
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
    // A permit reports its cost once. The report is claimed before the call, so one whose
    // answer was lost (it may have been applied) is never made twice; one refused as invalid
    // (nothing was written) may be made again.
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
}

/** A lone surrogate: in a `u` pattern a string is read by code points, so only an unpaired
 * surrogate is one (String.prototype.isWellFormed, which says the same, needs Node 20). */
const LONE_SURROGATE = /\p{Surrogate}/u;

/**
 * `checkAll`'s parts as the native call takes them: limiter handles, keys and costs (a part
 * that is not `{ limiter, key?, cost? }` is refused naming it; the core checks the values).
 */
function partsOf(parts) {
  if (!Array.isArray(parts)) throw invalidArgument('parts', 'must be an array of { limiter, key, cost } objects');
  const handles = [];
  const keys = [];
  const costs = [];
  parts.forEach((part, i) => {
    if (part === null || typeof part !== 'object') {
      throw invalidArgument(`parts[${i}]`, 'must be a { limiter, key, cost } object');
    }
    const handle = limiterHandleOf(part.limiter);
    if (handle === undefined) throw invalidArgument(`parts[${i}].limiter`, 'must be a Limiter');
    if (part.key != null && typeof part.key !== 'string') {
      throw invalidArgument(`parts[${i}].key`, 'must be a string, null or undefined');
    }
    // The native call would replace a lone surrogate silently: refuse it, as every key is.
    const lone = typeof part.key === 'string' ? LONE_SURROGATE.exec(part.key) : null;
    if (lone) {
      const code = lone[0].charCodeAt(0).toString(16).toUpperCase();
      throw invalidArgument(`parts[${i}].key`, `must be a well-formed Unicode string; found a lone surrogate U+${code}`);
    }
    if (part.cost !== undefined && typeof part.cost !== 'number') {
      throw invalidArgument(`parts[${i}].cost`, 'must be a number');
    }
    handles.push(handle);
    keys.push(part.key == null ? null : part.key);
    costs.push(part.cost === undefined ? 1 : part.cost);
  });
  return [handles, keys, costs];
}

/**
 * The public combined decision: each part carries its `limiter` beside its key, cost and
 * decision, and `release()` gives back every admitted concurrent part's lease (each is tried;
 * the first failure rejects).
 */
function combinedDecision(combined, parts) {
  const decided = combined.parts.map((p, i) => ({
    limiter: parts[i].limiter,
    key: p.key,
    cost: p.cost,
    decision: withTicket(p.decision, nativeLimiterOf(parts[i].limiter)),
  }));
  return {
    allowed: combined.allowed,
    retryAfterMs: combined.retryAfterMs,
    parts: decided,
    async release() {
      const released = await Promise.allSettled(
        decided.filter((p) => p.decision.lease).map((p) => p.limiter.release(p.decision.lease)),
      );
      const failed = released.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
  };
}

/**
 * Where limiter state lives; every limiter built from one backend shares it. `new Backend()` is
 * an in-process memory backend.
 */
class Backend {
  #native;

  constructor(token, nativeBackend) {
    this.#native = token === WRAP ? nativeBackend : new NativeBackend();
  }

  static {
    nativeBackendOf = (backend) => (backend !== null && typeof backend === 'object' && #native in backend ? backend.#native : backend);
  }

  static memory(options) {
    return new Backend(WRAP, NativeBackend.memory(options));
  }
  static redis(url, options) {
    return new Backend(WRAP, NativeBackend.redis(url, options));
  }
  static cluster(seeds, options) {
    return new Backend(WRAP, NativeBackend.cluster(seeds, options));
  }
  static sentinel(options) {
    if (options === null || typeof options !== 'object') return new Backend(WRAP, NativeBackend.sentinel(options));
    // Where the primary is found, apart from the options every Redis backend takes.
    const { sentinels, service, username, password, db, sentinelUsername, sentinelPassword, sentinelTls, ...redis } =
      options;
    const sentinel = { service, username, password, db, sentinelUsername, sentinelPassword, sentinelTls };
    return new Backend(WRAP, NativeBackend.sentinel(sentinels, sentinel, redis));
  }

  get memoryKeys() {
    return this.#native.memoryKeys;
  }
  stats() {
    return this.#native.stats();
  }

  concurrent(name, limit, options) {
    return new Limiter(WRAP, this.#native.concurrent(name, limit, options));
  }
  bucket(name, limit, interval, options) {
    return new Limiter(WRAP, this.#native.bucket(name, limit, interval, options));
  }
  window(name, limit, interval, options) {
    return new Limiter(WRAP, this.#native.window(name, limit, interval, options));
  }
  windows(name, windows, options) {
    return new Limiter(WRAP, this.#native.windows(name, windows, options));
  }
  slidingWindow(name, limits, options) {
    return new Limiter(WRAP, this.#native.slidingWindow(name, limits, options));
  }
  tokenBucket(name, rate, capacity, options) {
    return new Limiter(WRAP, this.#native.tokenBucket(name, rate, capacity, options));
  }
  partitions(name, totalRate, partitions, options) {
    return new Limiter(WRAP, this.#native.partitions(name, totalRate, partitions, options));
  }
  leased(name, rate, capacity, options) {
    return new Limiter(WRAP, this.#native.leased(name, rate, capacity, options));
  }
  leaky(name, size, drain, options) {
    return new Limiter(WRAP, this.#native.leaky(name, size, drain, options));
  }
  points(name, capacity, refill, options) {
    return new Limiter(WRAP, this.#native.points(name, capacity, refill, options));
  }
  calendar(name, limit, period, options) {
    return new Limiter(WRAP, this.#native.calendar(name, limit, period, options));
  }
  unlimited(name) {
    return new Limiter(WRAP, this.#native.unlimited(name));
  }
  /** Specs as data: the spec as an object or as JSON text (durations in seconds). */
  limiter(name, spec) {
    if (typeof spec === 'string') return this.limiterFromJson(name, spec);
    if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) {
      throw invalidArgument('spec', 'must be an object or a JSON string');
    }
    return this.limiterFromJson(name, JSON.stringify(spec));
  }
  limiterFromJson(name, specJson) {
    return new Limiter(WRAP, this.#native.limiterFromJson(name, specJson));
  }

  // Several limits at once, all or nothing (see node/src/check_all.rs).
  checkAll(parts) {
    if (tracing !== null) return tracing(this, 'checkAll', parts);
    return promisedCall(() => {
      const [handles, keys, costs] = partsOf(parts);
      return this.#native.checkAll(handles, keys, costs);
    }).then((combined) => combinedDecision(combined, parts));
  }
  acquireAll(parts, options) {
    if (tracing !== null) return tracing(this, 'acquireAll', parts, options);
    const signal = options == null ? undefined : options.signal;
    let shaped;
    try {
      shaped = partsOf(parts);
    } catch (error) {
      return Promise.reject(error);
    }
    const [handles, keys, costs] = shaped;
    const wrap = (combined) => combinedDecision(combined, parts);
    if (signal == null) return promisedCall(() => this.#native.acquireAll(handles, keys, costs, options)).then(wrap);
    if (!isAbortSignal(signal)) return Promise.reject(invalidArgument('signal', 'must be an AbortSignal'));
    if (signal.aborted) return Promise.reject(abortError(signal));
    const canceller = newCanceller();
    const onAbort = () => cancel(canceller);
    signal.addEventListener('abort', onAbort, { once: true });
    return promisedCall(() => this.#native.acquireAll(handles, keys, costs, options, canceller)).then(
      (combined) => {
        signal.removeEventListener('abort', onAbort);
        return wrap(combined);
      },
      (error) => {
        signal.removeEventListener('abort', onAbort);
        throw signal.aborted ? abortError(signal) : error;
      },
    );
  }

  // Operating it: the registry, live limits, metrics and the Prometheus exposition. Registry
  // and metrics results cross as JSON text and are parsed here.
  async limiters() {
    return JSON.parse(await this.limitersJson());
  }
  limitersJson() {
    return promisedCall(() => this.#native.limitersJson());
  }
  setLimit(name, spec, key) {
    return promisedCall(() => this.#native.setLimitJson(name, specText(spec), key));
  }
  setLimitJson(name, specJson, key) {
    return promisedCall(() => this.#native.setLimitJson(name, specJson, key));
  }
  clearLimit(name, key) {
    return promisedCall(() => this.#native.clearLimit(name, key));
  }
  flush() {
    return promisedCall(() => this.#native.flush());
  }
  async metrics(options) {
    return JSON.parse(await this.metricsJson(fleetOption(options)));
  }
  metricsJson(fleet) {
    return promisedCall(() => this.#native.metricsJson(fleet));
  }
  async prometheus(options) {
    return this.prometheusText(fleetOption(options));
  }
  prometheusText(fleet) {
    return promisedCall(() => this.#native.prometheusText(fleet));
  }
  /** Identifies this backend within the process (a limiter's `backendId`). */
  get id() {
    return this.#native.id;
  }
  startObserving() {
    this.#native.startObserving();
  }
  stopObserving() {
    this.#native.stopObserving();
  }
  durations() {
    return JSON.parse(this.#native.durationsJson());
  }
  static durationBounds() {
    return NativeBackend.durationBounds();
  }
}

/**
 * Fleet usage load shedder: at most `limit` non-critical requests in flight across every
 * process sharing the backend; critical requests bypass it.
 */
class FleetShedder {
  #native;

  constructor(backend, name, limit, options) {
    this.#native = new NativeFleetShedder(nativeBackendOf(backend), name, limit, options);
  }

  enter(critical) {
    return promisedCall(() => this.#native.enter(critical));
  }
  leave(ticket) {
    return promisedCall(() => this.#native.leave(ticket));
  }
  async run(fn, options) {
    if (typeof fn !== 'function') throw invalidArgument('fn', 'must be a function');
    refuseUnknownOptions(options, ['critical']);
    const ticket = await this.enter(Boolean(options && options.critical));
    try {
      return await fn();
    } finally {
      await this.leave(ticket);
    }
  }
}

native.setClientLanguage(`node ${process.versions.node}`);

module.exports = {
  Backend,
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
Object.defineProperty(module.exports, TRACING, {
  value: {
    set(traced) {
      tracing = traced;
      // Driven round trips are noted only while some backend is traced.
      native.drivenTracing(traced !== null);
    },
    untraced,
    /** The native id of the call `untraced` just made, if it returned a waiting Promise. */
    callId: () => lastCallId,
    /** The driven round trip that carried call `id`, while its result settles (once). */
    roundTrip: native.drivenRoundTrip,
    /**
     * The round trips of runtime call `id` once its result settles, or without an id of the
     * blocking call `untraced` just made (each once; see node/src/trace.rs).
     */
    runtimeRoundTrips: native.runtimeRoundTrips,
  },
});
