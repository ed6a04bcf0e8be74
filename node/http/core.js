'use strict';
// The framework-neutral half of ratekeeper's HTTP middleware (ratekeeper/express, /fastify,
// /hono, /nestjs): options validated once, when the middleware is built; per request, the
// limiters checked in order (a request passes only when all pass), the RateLimit header fields,
// the refusal (429, or 503 for a shedder's refusal or a backend that failed closed), and what
// happens after the response (leases released, units given back under `count`). No limiter
// logic lives here: every decision is the core's.

const { FleetShedder, Limiter, codes } = require('../index.js');
const { ceilSeconds } = require('../index.js');
const { invalidArgument } = require('./errors.js');
const { HEADER_FORMS, policyShape, members, rateLimitFields } = require('./headers.js');
const { addressKey, clientAddress, trustedProxyList } = require('./client-address.js');

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
];

/** Kinds whose units a request can give back (`pointsUsed(key, cost, 0)`), for `count`. */
const REFUNDABLE = new Set(['token_bucket', 'leaky', 'points']);

/** Problem types of the RateLimit header fields draft (RFC 9457 bodies). */
const PROBLEM = 'https://iana.org/assignments/http-problem-types';

/** Seconds a client is asked to wait when the backend failed closed. */
const UNAVAILABLE_RETRY_SECONDS = 1;

/** Errors that mean the backend could not decide (its failure policy is fail_closed). */
function isBackendFailure(error) {
  return error != null && (error.code === codes.BACKEND_UNAVAILABLE || error.code === codes.TIMEOUT);
}

function optionalFunction(options, name) {
  const value = options[name];
  if (value !== undefined && typeof value !== 'function') throw invalidArgument(name, 'must be a function');
  return value;
}

/** One entry of `limiter`: a Limiter (with its header shape) or a FleetShedder. */
function limiterEntry(value, index, count) {
  const parameter = index === null ? 'limiter' : `limiter[${index}]`;
  if (value instanceof FleetShedder) return { shedder: value };
  if (!(value instanceof Limiter)) {
    throw invalidArgument(parameter, 'must be a Limiter (from a Backend) or a FleetShedder');
  }
  if (count !== 'all' && !REFUNDABLE.has(value.kind) && value.kind !== 'concurrent' && value.kind !== 'unlimited') {
    throw invalidArgument(
      'count',
      `'${count}' gives units back after the response, which a ${value.kind} limiter ('${value.name}') cannot do: ` +
        'use a token_bucket, leaky or points limiter',
    );
  }
  return { limiter: value, name: value.name, shape: policyShape(value), refundable: REFUNDABLE.has(value.kind) };
}

/**
 * Validates `options` and returns the per-request core. Throws `ERR_INVALID_ARGUMENT` naming
 * the first bad option.
 */
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
  if (list.length === 0) throw invalidArgument('limiter', 'must name at least one limiter');
  const entries = list.map((value, i) => limiterEntry(value, Array.isArray(given) ? i : null, count));

  const cost = options.cost ?? 1;
  if (typeof cost !== 'function' && !(typeof cost === 'number' && Number.isFinite(cost) && cost > 0)) {
    throw invalidArgument('cost', 'must be a positive number or a function of the request');
  }
  const standardHeaders = options.standardHeaders ?? 'draft-11';
  if (standardHeaders !== false && !HEADER_FORMS.includes(standardHeaders)) {
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
  const trusted = trustedProxyList(options.trustedProxies);

  return new Core({ entries, cost, count, standardHeaders, shadow, keyGenerator, skip, handler, requestWasSuccessful, trusted });
}

class Core {
  constructor(settings) {
    Object.assign(this, settings);
    /** Requests that shadow mode let through although a limit refused them. */
    this.shadowRefused = 0;
  }

  /**
   * The rate-limiting key of a request: `keyGenerator`'s, or the client address (IPv6 by
   * /56) from the peer address and, behind trusted proxies only, the forwarding headers.
   */
  async key(request, peer, header) {
    if (this.keyGenerator) {
      const key = await this.keyGenerator(request);
      if (typeof key !== 'string') throw invalidArgument('keyGenerator', `must return a string, got ${typeof key}`);
      return key;
    }
    const address = clientAddress(peer, header, this.trusted);
    if (!address) throw invalidArgument('keyGenerator', 'the request has no client address: give a keyGenerator');
    return addressKey(address);
  }

  /**
   * Decides a request: `null` when `skip` exempts it (nothing touched), else an Outcome. A
   * backend failure (fail_closed) or a shedder's refusal is an Outcome with status 503; any
   * other error (a key or cost the limiter refuses as invalid) rejects, for the framework's
   * error handling.
   */
  async decide(request, peer, header) {
    if (this.skip && (await this.skip(request))) return null;
    const key = await this.key(request, peer, header);
    const cost = typeof this.cost === 'function' ? await this.cost(request) : this.cost;
    const outcome = new Outcome(this, key, cost);
    for (const entry of this.entries) {
      let refusal;
      try {
        refusal = await outcome.take(entry);
      } catch (error) {
        if (isBackendFailure(error)) refusal = 'unavailable';
        else if (error != null && error.code === codes.SHED) refusal = 'shed';
        else {
          await outcome.giveBack();
          throw error;
        }
      }
      if (refusal !== null) {
        outcome.refusals.push({ reason: refusal, name: entry.name ?? entry.shedder?.name ?? 'shedder' });
        if (!this.shadow) break; // later limiters are not charged for a refused request
      }
    }
    outcome.seal();
    if (outcome.refused) await outcome.giveBack();
    return outcome;
  }
}

/** One request's decisions, its header fields and its refusal, if any. */
class Outcome {
  constructor(core, key, cost) {
    this.core = core;
    this.key = key;
    this.cost = cost;
    this.taken = []; // [{ entry, decision | ticket }] to release or refund after the response
    this.policies = [];
    this.refusals = [];
    this.refused = false;
    this.completed = false;
  }

  /** Charges one entry; the reason it refused, or null. */
  async take(entry) {
    if (entry.shedder) {
      const ticket = await entry.shedder.enter(false);
      this.taken.push({ entry, ticket });
      return null;
    }
    const decision = await entry.limiter.check(this.key, this.cost);
    this.policies.push(...members(entry.name, entry.shape, decision));
    if (!decision.allowed) {
      this.retryAfterMs = Math.max(this.retryAfterMs ?? 0, decision.retryAfterMs);
      return 'limited';
    }
    this.taken.push({ entry, decision });
    return null;
  }

  /** Fixes the response: status, header fields and the problem body. */
  seal() {
    const core = this.core;
    this.headers = rateLimitFields(core.standardHeaders, this.policies);
    if (this.refusals.length === 0) return;
    if (core.shadow) {
      core.shadowRefused += 1;
      return;
    }
    this.refused = true;
    const { reason } = this.refusals[0];
    this.reason = reason;
    this.status = reason === 'limited' ? 429 : 503;
    this.retryAfterSeconds = reason === 'limited' ? ceilSeconds(this.retryAfterMs) : UNAVAILABLE_RETRY_SECONDS;
    this.headers.push(['Retry-After', String(this.retryAfterSeconds)]);
    const violated = this.refusals.map((r) => r.name);
    if (reason === 'limited') {
      this.problem = {
        type: `${PROBLEM}#quota-exceeded`,
        title: 'Request cannot be satisfied as assigned quota has been exceeded',
        status: 429,
        detail: `Retry in ${this.retryAfterSeconds} s.`,
        'violated-policies': violated,
      };
    } else if (reason === 'shed') {
      this.problem = {
        type: `${PROBLEM}#temporary-reduced-capacity`,
        title: 'Request cannot be satisfied due to temporary server capacity constraints',
        status: 503,
        detail: `Retry in ${this.retryAfterSeconds} s.`,
        'violated-policies': violated,
      };
    } else {
      this.problem = {
        type: 'about:blank',
        title: 'Service Unavailable',
        status: 503,
        detail: 'The rate limiter cannot reach its backend.',
      };
    }
  }

  /** Whether the response must be watched to finish this request (release, refund). */
  get pending() {
    return this.taken.length > 0;
  }

  /**
   * Gives back what the request took: leases and shedder slots always; units of refundable
   * limiters when `refund` is set. Errors are swallowed: a lease lost meanwhile, or a backend
   * that failed, must not turn a response already sent into an error.
   */
  async giveBack(refund = true) {
    const taken = this.taken;
    this.taken = [];
    await Promise.all(
      taken.map(({ entry, decision, ticket }) => {
        if (entry.shedder) return entry.shedder.leave(ticket).catch(() => {});
        if (decision.lease) return entry.limiter.release(decision.lease).catch(() => {});
        if (refund && entry.refundable) return entry.limiter.pointsUsed(this.key, this.cost, 0).catch(() => {});
        return undefined;
      }),
    );
  }

  /**
   * Called once the response is done: `status` is its status code, or null when the client
   * went away before it was sent (counted as a failure). Releases leases, and under
   * `count: 'failures'` / `'successes'` gives back the units of a response that does not count.
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
    return this.giveBack(!counts);
  }

  /** What a `handler` receives about a refusal. */
  get info() {
    return {
      status: this.status,
      reason: this.reason,
      retryAfterSeconds: this.retryAfterSeconds,
      violatedPolicies: this.refusals.map((r) => r.name),
      problem: this.problem,
      key: this.key,
    };
  }
}

/** The default refusal body's media type (RFC 9457). */
const PROBLEM_MEDIA_TYPE = 'application/problem+json';

module.exports = { buildCore, PROBLEM_MEDIA_TYPE, OPTIONS };
