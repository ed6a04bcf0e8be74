'use strict';
// The framework-neutral half of ratekeeper's HTTP middleware (ratekeeper/express, /fastify,
// /hono, /nestjs): options validated once, when the middleware is built; per request, the
// limiters checked in order (a request passes only when all pass), the RateLimit header fields,
// the refusal (429, or 503 for a shedder's refusal or a backend that failed closed), and what
// happens after the response (leases released, units given back under `count`). Every decision
// is the core's, and so are the rules shared with the other languages (tests/http/cases.json):
// the client key, the header fields and the partition key (`NativeHttpRules`), and each
// limiter's capacity, refundability and window.

const { FleetShedder, Limiter, codes, ceilSeconds } = require('../index.js');
const { NativeHttpRules } = require('../addon.js');
const { invalidArgument } = require('./errors.js');

// Each decision goes on the request's active span when @opentelemetry/api is installed.
let annotate = null;
try {
  ({ annotate } = require('../otel.js'));
} catch (e) {
  if (e.code !== 'MODULE_NOT_FOUND') throw e;
}

/** Every option, in every framework's adapter. */
const OPTIONS = [
  'limiter',
  'keyGenerator',
  'cost',
  'skip',
  'count',
  'requestWasSuccessful',
  'standardHeaders',
  'handler',
  'shadow',
  'trustedProxies',
  'proxyHeader',
  'partitionKeySecret',
];

/** The header forms `standardHeaders` accepts (false: none); the core validates the name. */
const HEADER_FORMS = ['draft-11', 'draft-7', 'draft-6', 'legacy'];

/** The name a FleetShedder goes by in `violated-policies` (the binding does not expose its name). */
const SHEDDER_POLICY = 'shedder';

/** Problem types of the RateLimit header fields draft (RFC 9457 bodies). */
const PROBLEM = 'https://iana.org/assignments/http-problem-types';

/** How many client keys a middleware remembers before it starts over. */
const KEYS_REMEMBERED = 4096;

/** Seconds a client is asked to wait when the backend failed closed. */
const UNAVAILABLE_RETRY_SECONDS = 1;

/** Errors that mean the backend could not decide (its failure policy is fail_closed). */
function isBackendFailure(error) {
  return (
    error != null &&
    (error.code === codes.BACKEND_UNAVAILABLE || error.code === codes.TIMEOUT || error.code === codes.BACKEND_REJECTED)
  );
}

function optionalFunction(options, name) {
  const value = options[name];
  if (value !== undefined && typeof value !== 'function') throw invalidArgument(name, 'must be a function');
  return value;
}

/**
 * One entry of `limiter`: a FleetShedder, or a Limiter with its header shape and how `count`
 * applies to it — `check` (count 'all'), `refund` (charged before the handler, refunded after a
 * response that does not count: token bucket, leaky, points) or `peek` (peeked before, charged
 * after a response that counts: the kinds that cannot refund).
 */
function limiterEntry(value, count) {
  if (value instanceof FleetShedder) {
    if (count !== 'all') throw invalidArgument('count', "a FleetShedder counts requests in flight; use count 'all'");
    return { shedder: value, name: SHEDDER_POLICY };
  }
  if (!(value instanceof Limiter)) {
    throw invalidArgument('limiter', `must be a Limiter, a FleetShedder or a non-empty array of them, got ${String(value)}`);
  }
  if (value.kind === 'concurrent' && count !== 'all') {
    throw invalidArgument('count', `the concurrent limiter '${value.name}' counts requests in flight; use count 'all'`);
  }
  const mode = count === 'all' ? 'check' : value.refundable ? 'refund' : 'peek';
  return { limiter: value, name: value.name, windowMs: value.windowMs, refundable: value.refundable, mode };
}

/**
 * Validates `options` and returns the per-request core. Throws `ERR_INVALID_ARGUMENT` naming
 * the first bad option.
 */
/**
 * The core's rules for these options, their JavaScript types checked here (to name them) and
 * their values by the core: `trustedProxies`, `proxyHeader`, `partitionKeySecret`.
 */
function httpRules(options, standardHeaders, entries) {
  const trusted = options.trustedProxies ?? [];
  if (!Array.isArray(trusted)) {
    // A lone string would be one entry in Python and characters elsewhere: ask for the list it meant.
    throw invalidArgument('trustedProxies', `must be an array of IP addresses or CIDR ranges, got ${JSON.stringify(trusted)}`);
  }
  for (const entry of trusted) {
    if (typeof entry !== 'string') throw invalidArgument('trustedProxies', `must be IP addresses or CIDR ranges, got ${JSON.stringify(entry)}`);
  }
  const proxyHeader = options.proxyHeader === undefined ? 'X-Forwarded-For' : options.proxyHeader;
  if (typeof proxyHeader !== 'string') {
    throw invalidArgument('proxyHeader', `must be 'X-Forwarded-For' or 'Forwarded' (the header your proxy sets), got ${JSON.stringify(proxyHeader)}`);
  }
  const secret = options.partitionKeySecret ?? null;
  let bytes = null;
  if (typeof secret === 'string') bytes = Buffer.from(secret, 'utf8');
  else if (secret instanceof Uint8Array) bytes = Buffer.from(secret);
  else if (secret !== null) throw invalidArgument('partitionKeySecret', `must be a string or a Uint8Array, got ${typeof secret}`);
  // The policies the fields may name, by index: every entry (a shedder's is never reported).
  const policies = entries.map((entry) => ({ name: entry.name, windowMs: entry.windowMs ?? null }));
  return new NativeHttpRules(standardHeaders === false ? null : standardHeaders, trusted, proxyHeader, bytes, policies);
}

/** The packed decisions `rateLimitFields` hands the core, grown as needed (one call at a time). */
let packed = new Float64Array(64);

/**
 * The rate-limit header fields, as `[name, value]` pairs, of `reports` (`[{ index, decision }]`:
 * the entry's index and its decision, in order) for a request counted under `key` (undefined
 * without a partition key secret: only draft-11's `pk` reads it), by the core's rules through
 * `fields`, their bound function (`NativeHttpRules#fieldsFunction`). The decisions cross as
 * numbers (see node/src/http.rs).
 */
function rateLimitFields(fields, reports, key) {
  let size = 0;
  for (const { decision } of reports) size += 7 + 5 * (decision.limits ? decision.limits.length : 0);
  if (size > packed.length) packed = new Float64Array(Math.max(size, 2 * packed.length));
  let at = 0;
  for (const { index, decision: d } of reports) {
    const limits = d.limits || [];
    packed[at++] = index;
    packed[at++] = d.allowed ? 1 : 0;
    packed[at++] = d.limit;
    packed[at++] = d.remaining;
    packed[at++] = d.retryAfterMs;
    packed[at++] = d.resetAfterMs;
    packed[at++] = limits.length;
    for (const l of limits) {
      packed[at++] = l.windowMs;
      packed[at++] = l.limit;
      packed[at++] = l.remaining;
      packed[at++] = l.retryAfterMs;
      packed[at++] = l.resetAfterMs;
    }
  }
  // Lines read by indexOf and slice: `split` on the string the call returns cost more than
  // the call itself (bench/node/http/fields.js).
  const text = fields(packed, at, key);
  const out = [];
  for (let line = 0; line < text.length; ) {
    const name = text.indexOf('\n', line);
    let value = text.indexOf('\n', name + 1);
    if (value === -1) value = text.length;
    out.push([text.slice(line, name), text.slice(name + 1, value)]);
    line = value + 1;
  }
  return out;
}

function buildCore(options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw invalidArgument('options', 'must be an object');
  }
  for (const name of Object.keys(options)) {
    if (!OPTIONS.includes(name)) throw invalidArgument(name, `is not an option; the options are ${OPTIONS.join(', ')}`);
  }
  const count = options.count ?? 'all';
  if (!['all', 'failures', 'successes'].includes(count)) {
    throw invalidArgument('count', `must be 'all', 'failures' or 'successes', got ${JSON.stringify(count)}`);
  }
  const given = options.limiter;
  if (given === undefined) throw invalidArgument('limiter', 'is required: a Limiter, a FleetShedder, or an array of them');
  const list = Array.isArray(given) ? given : [given];
  if (list.length === 0) throw invalidArgument('limiter', 'must be a Limiter, a FleetShedder or a non-empty array of them');
  const entries = list.map((value, index) => ({ ...limiterEntry(value, count), index }));

  const cost = options.cost ?? 1;
  if (typeof cost !== 'function') {
    if (!(Number.isInteger(cost) && cost >= 1)) {
      throw invalidArgument('cost', `must be a whole number >= 1 or a function of the request, got ${String(cost)}`);
    }
    for (const entry of entries) {
      // The core would refuse every such call at request time: say so now, not as a 500 per
      // request (an unlimited limiter's capacity is the largest cost, 2^53).
      const most = entry.limiter ? entry.limiter.capacity : null;
      if (most !== null && cost > most) {
        throw invalidArgument('cost', `${cost} exceeds the capacity of '${entry.name}' (${most}); no request could ever be admitted`);
      }
    }
  }
  const standardHeaders = options.standardHeaders ?? 'draft-11';
  if (standardHeaders !== false && typeof standardHeaders !== 'string') {
    throw invalidArgument(
      'standardHeaders',
      `must be ${HEADER_FORMS.map((f) => `'${f}'`).join(', ')} or false, got ${JSON.stringify(standardHeaders)}`,
    );
  }
  const shadow = options.shadow ?? false;
  if (typeof shadow !== 'boolean') throw invalidArgument('shadow', 'must be a boolean');
  const keyGenerator = optionalFunction(options, 'keyGenerator');
  const skip = optionalFunction(options, 'skip');
  const handler = optionalFunction(options, 'handler');
  const requestWasSuccessful = optionalFunction(options, 'requestWasSuccessful') ?? ((status) => status < 400);
  const rules = httpRules(options, standardHeaders, entries);

  return new Core({
    entries,
    cost,
    count,
    standardHeaders,
    shadow,
    keyGenerator,
    skip,
    handler,
    requestWasSuccessful,
    rules,
    partitioned: options.partitionKeySecret !== undefined && options.partitionKeySecret !== null,
    // Without trusted proxies the core never reads the proxy header (the key is the peer's).
    readsProxyHeader: (options.trustedProxies ?? []).length > 0,
  });
}

class Core {
  constructor(settings) {
    Object.assign(this, settings);
    /**
     * Requests let through although a limit refused them: by this option's shadow mode, or by
     * a limiter in shadow mode (its decision says `shadowRefused`).
     */
    this.shadowRefused = 0;
    /** Names whose backend is failing closed now: each outage is logged once (see `decide`). */
    this.failing = new Set();
    /** Whether the fields carry draft-11's `pk` (a partition key secret was given). */
    this.partitioned = settings.partitioned;
    /** The header the trusted proxies set (read once: a native getter costs a call). */
    this.proxyHeader = this.rules.proxyHeader;
    /**
     * The rules' per-request calls as plain functions bound to them: a napi-rs method call
     * costs about as much again as the work (node/src/http.rs).
     */
    this.fields = this.rules.fieldsFunction();
    this.clientKey = this.rules.clientKeyFunction();
    /** Client keys by peer and proxy header value, lately seen (see `key`). */
    this.keys = new Map();
  }

  /** The rate-limiting key of a request (see `generatedKey` and `addressKey`): a Promise or a string. */
  key(request, peer, header) {
    return this.keyGenerator ? this.generatedKey(request) : this.addressKey(peer, header);
  }

  /** The rate-limiting key `keyGenerator` gives a request. */
  async generatedKey(request) {
    const key = await this.keyGenerator(request);
    if (typeof key !== 'string') throw invalidArgument('keyGenerator', `must return a string, got ${typeof key}`);
    return key;
  }

  /**
   * The rate-limiting key of a request without `keyGenerator`: the client address (IPv6 by
   * /56) from the peer address and, behind trusted proxies only, the `proxyHeader` they set.
   * Synchronous: a request's path awaits only its checks (each await is a microtask).
   */
  addressKey(peer, header) {
    // Looking a header up is not free everywhere (Hono builds a Headers view for it).
    const given = this.readsProxyHeader ? header(this.proxyHeader) : undefined;
    // Every line of the header counts, in order: `header(name)` returns them joined by commas
    // (node:http and the Fetch API's Headers do), or an array of them.
    const value = given === undefined || given === null ? null : Array.isArray(given) ? given.join(',') : String(given);
    // The key is a function of these two texts for the middleware's life: the core is asked
    // once per pair seen lately (a native call costs more than the lookup).
    const memo = value === null ? `-${peer || ''}` : `+${peer || ''}\n${value}`;
    let key = this.keys.get(memo);
    if (key === undefined) {
      key = this.clientKey(peer || null, value);
      if (this.keys.size >= KEYS_REMEMBERED) this.keys.clear();
      this.keys.set(memo, key);
    }
    return key;
  }

  /**
   * Decides a request: `null` when `skip` exempts it (nothing touched), else an Outcome. A
   * backend failure (fail_closed) or a shedder's refusal is an Outcome with status 503; any
   * other error (a key or cost the limiter refuses as invalid) rejects, for the framework's
   * error handling, once what was taken is given back.
   */
  async decide(request, peer, header) {
    if (this.skip && (await this.skip(request))) return null;
    const key = this.keyGenerator ? await this.generatedKey(request) : this.addressKey(peer, header);
    const cost = typeof this.cost === 'function' ? await this.cost(request) : this.cost;
    const outcome = new Outcome(this, key, cost);
    for (const entry of this.entries) {
      try {
        if (entry.shedder) await outcome.enter(entry);
        else outcome.record(entry, await outcome.ask(entry));
        if (this.failing.size > 0) this.failing.delete(entry.name);
      } catch (error) {
        if (error != null && error.code === codes.SHED) {
          outcome.shed = true;
          outcome.refusing.push({ entry, decision: null });
        } else if (isBackendFailure(error)) {
          // The backend failed closed (fail_open / fallback backends answer instead): a 503
          // with a short Retry-After, never a 500. Shadow mode lets the request through. Why is
          // said once per outage (the limiter's metrics count each failure in `errors`).
          if (!this.failing.has(entry.name)) {
            this.failing.add(entry.name);
            console.warn(`ratekeeper: '${entry.name}' failed closed, answering 503 until its backend answers (each failure counts in the limiter's metrics().errors): ${error.message}`);
          }
          if (this.shadow) continue;
          await outcome.giveBack();
          outcome.refuse('unavailable');
          return outcome;
        } else {
          await outcome.giveBack();
          throw error;
        }
      }
      if (outcome.refusing.length > 0 && !this.shadow) break; // later limiters are not charged
    }
    if (this.standardHeaders !== false) {
      // The key crosses to the core only when it is hashed into draft-11's `pk`.
      outcome.headers = rateLimitFields(this.fields, outcome.reports, this.partitioned ? key : undefined);
    }
    if (outcome.refusing.length === 0 || this.shadow) {
      // One rule for both shadow modes (this option's, a limiter's): a request let through
      // although a limit refused it.
      if (outcome.refusing.length > 0 || outcome.shadowed.length > 0) this.shadowRefused += 1;
      return outcome;
    }
    await outcome.giveBack();
    outcome.refuse(outcome.shed ? 'shed' : 'limited');
    return outcome;
  }
}

/** One request's decisions, its header fields and its refusal, if any. */
class Outcome {
  constructor(core, key, cost) {
    this.core = core;
    this.key = key;
    this.cost = cost;
    this.taken = []; // [{ entry, decision, ticket }]: what to settle after the response
    this.reports = []; // [{ index, decision }]: every decision, for the header fields
    this.refusing = []; // [{ entry, decision }]: the entries that refused
    this.shadowed = []; // [{ entry, decision }]: limiters in shadow mode that would have refused
    this.shed = false;
    this.refused = false;
    this.completed = false;
    this.headers = [];
  }

  /** Takes a slot of a shedder entry. */
  async enter(entry) {
    const ticket = await entry.shedder.enter(false);
    this.taken.push({ entry, ticket });
  }

  /** The decision of a limiter entry: its check, or in `peek` mode its peek (a Promise). */
  ask(entry) {
    return entry.mode === 'peek' ? entry.limiter.peek(this.key) : entry.limiter.check(this.key, this.cost);
  }

  /** Notes a limiter entry's decision; a refusal lands in `refusing`. */
  record(entry, decision) {
    if (annotate) annotate(entry.limiter, decision);
    this.reports.push({ index: entry.index, decision });
    // A shadow refusal took nothing: there is nothing to settle or give back.
    if (decision.shadowRefused) this.shadowed.push({ entry, decision });
    else if (decision.allowed) this.taken.push({ entry, decision });
    else this.refusing.push({ entry, decision });
  }

  /** Fixes the refusal: status, Retry-After and the problem body (as Python's middleware does). */
  refuse(reason) {
    this.refused = true;
    this.reason = reason;
    const names = this.refusing.map((r) => r.entry.name);
    if (reason === 'limited') {
      const waits = this.refusing.map((r) => r.decision.retryAfterMs);
      this.retryAfterSeconds = Math.max(1, ceilSeconds(Math.max(...waits)));
      this.status = 429;
      this.problem = problem(`${PROBLEM}#quota-exceeded`, 'Too Many Requests', 429, `Rate limit exceeded; retry in ${this.retryAfterSeconds} s.`, names);
    } else if (reason === 'shed') {
      this.retryAfterSeconds = UNAVAILABLE_RETRY_SECONDS;
      this.status = 503;
      this.problem = problem(`${PROBLEM}#temporary-reduced-capacity`, 'Service Unavailable', 503, 'The service is shedding load; retry shortly.', names);
    } else {
      this.retryAfterSeconds = UNAVAILABLE_RETRY_SECONDS;
      this.status = 503;
      this.headers = [];
      this.problem = problem('about:blank', 'Service Unavailable', 503, "The rate limiter's backend is unavailable.", null);
    }
    this.headers.unshift(['Retry-After', String(this.retryAfterSeconds)]);
  }

  /**
   * Whether the response must be watched to finish this request: a shedder slot or a lease to
   * give back, or a charge that `count` decides after the response. A plain check under
   * `count: 'all'` has nothing left to do, so its response is not watched.
   */
  get pending() {
    return this.taken.some(({ entry, decision }) => entry.shedder || entry.mode !== 'check' || decision.lease);
  }

  /**
   * Undoes what the request took, after a refusal by a later limiter or an error: leases and
   * shedder slots are given back, charges of refundable kinds refunded; a window-like charge
   * stays (put the strictest limiter first). Errors are swallowed: nothing more can be done.
   */
  async giveBack() {
    const taken = this.taken;
    this.taken = [];
    await Promise.all(
      taken.map(({ entry, decision, ticket }) => {
        if (entry.shedder) return entry.shedder.leave(ticket).catch(() => {});
        if (decision.lease) return entry.limiter.release(decision.lease).catch(() => {});
        if (entry.mode !== 'peek' && entry.refundable) {
          return entry.limiter.pointsUsed(this.key, this.cost, 0).catch(() => {});
        }
        return undefined;
      }),
    );
  }

  /**
   * Called once the response is done: `status` is its status code, or null when the client
   * went away before it was sent (a failure). Releases leases and shedder slots; under
   * `count: 'failures'` / `'successes'` refunds (`refund` mode) a response that does not count
   * and charges (`peek` mode) one that does. Errors are swallowed: the response is sent.
   */
  complete(status) {
    if (this.completed) return Promise.resolve();
    this.completed = true;
    const core = this.core;
    let counts = true;
    if (core.count !== 'all') {
      const succeeded = status !== null && Boolean(core.requestWasSuccessful(status));
      counts = core.count === 'failures' ? !succeeded : succeeded;
    }
    const taken = this.taken;
    this.taken = [];
    return Promise.all(
      taken.map(({ entry, decision, ticket }) => {
        if (entry.shedder) return entry.shedder.leave(ticket).catch(() => {});
        if (decision.lease) return entry.limiter.release(decision.lease).catch(() => {});
        if (entry.mode === 'refund' && !counts) return entry.limiter.pointsUsed(this.key, this.cost, 0).catch(() => {});
        if (entry.mode === 'peek' && counts) return entry.limiter.check(this.key, this.cost).catch(() => {});
        return undefined;
      }),
    ).then(() => undefined);
  }

  /** What a `handler` receives about a refusal. */
  get info() {
    return {
      status: this.status,
      reason: this.reason,
      retryAfterSeconds: this.retryAfterSeconds,
      violatedPolicies: this.refusing.map((r) => r.entry.name),
      problem: this.problem,
      key: this.key,
    };
  }
}

/** An RFC 9457 problem body. */
function problem(type, title, status, detail, policies) {
  const body = { type, title, status, detail };
  if (policies !== null) body['violated-policies'] = policies;
  return body;
}

/** The default refusal body's media type (RFC 9457). */
const PROBLEM_MEDIA_TYPE = 'application/problem+json';

module.exports = { buildCore, rateLimitFields, PROBLEM_MEDIA_TYPE, OPTIONS };
