'use strict';
// The RateLimit header fields of a request's decisions, in each form the middleware offers:
// draft-11 (default; `RateLimit-Policy` and `RateLimit` as Structured Field lists, one member
// per limit), draft-7 (one `RateLimit` field), draft-6 (three fields) and legacy
// (`X-RateLimit-*`). Seconds are whole and rounded up, so a client that waits as told is never
// early. The forms are described in docs/src/guides/http/index.md.

const { ceilSeconds } = require('../index.js');

/** The header forms `standardHeaders` accepts (false: none). */
const HEADER_FORMS = ['draft-11', 'draft-7', 'draft-6', 'legacy'];

/**
 * The window (`w`) of a single-limit limiter in seconds, where its kind has one, read from its
 * spec once when the middleware is built; `null` for an `unlimited` limiter (no policy to
 * announce). Multi-limit limiters take each limit's window from the decision.
 */
function policyShape(limiter) {
  const spec = limiter.spec;
  switch (spec.kind) {
    case 'unlimited':
      return null;
    case 'bucket':
    case 'window':
      return { window: spec.interval };
    case 'token_bucket':
      return { window: spec.capacity / spec.rate };
    case 'leaky':
      return { window: spec.drain };
    case 'points':
      return { window: spec.refill };
    default:
      return { window: null }; // calendar (days vary), concurrent, partitions, leased, windows
  }
}

/** Seconds as a policy name's suffix: whole when whole (`60`), else as short as exact (`0.5`). */
function whole(seconds) {
  return Number.isInteger(seconds) ? String(seconds) : String(Number(seconds.toPrecision(6)));
}

/**
 * The policy members of one limiter's decision: one per limit, a multi-limit limiter's named
 * `name/<window>s` — with quota, window, remaining, seconds until full, and its wait.
 */
function members(name, shape, decision) {
  if (shape === null) return [];
  const limits = decision.limits;
  if (Array.isArray(limits) && limits.length > 0) {
    return limits.map((limit) => ({
      name: `${name}/${whole(limit.windowMs / 1000)}s`,
      quota: Math.floor(limit.limit),
      window: limit.windowMs / 1000,
      remaining: Math.max(0, Math.floor(limit.remaining)),
      reset: ceilSeconds(limit.resetAfterMs),
      retryAfterMs: limit.retryAfterMs,
      allowed: limit.retryAfterMs <= 0,
    }));
  }
  return [
    {
      name,
      quota: Math.floor(decision.limit),
      window: shape.window,
      remaining: Math.max(0, Math.floor(decision.remaining)),
      reset: ceilSeconds(decision.resetAfterMs),
      retryAfterMs: decision.retryAfterMs,
      allowed: decision.allowed,
    },
  ];
}

/** The one limit the single-limit forms report: the one that refused (longest wait), else the least left. */
function binding(list) {
  const refused = list.filter((m) => !m.allowed);
  if (refused.length > 0) return refused.reduce((a, b) => (b.retryAfterMs > a.retryAfterMs ? b : a));
  return list.reduce((a, b) => (b.remaining < a.remaining ? b : a));
}

/** `;w=60` for a member with a window (whole seconds, rounded up, at least 1). */
function windowParameter(member) {
  return member.window !== null && member.window > 0 ? `;w=${Math.max(1, Math.ceil(member.window - 1e-9))}` : '';
}

/** An RFC 9651 sf-string (printable ASCII; anything else becomes `?`). */
function sfString(value) {
  return `"${value.replace(/[^\x20-\x7e]/g, '?').replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/**
 * The `[name, value]` header pairs of `list` (policy members) in `form`; `pk` (draft-11 only)
 * is the partition key's bytes in base64, sent as each `RateLimit` member's `pk` parameter.
 */
function rateLimitFields(form, list, pk = null) {
  if (form === false || list.length === 0) return [];
  if (form === 'draft-11') {
    const partition = pk === null ? '' : `;pk=:${pk}:`;
    return [
      ['RateLimit-Policy', list.map((m) => `${sfString(m.name)};q=${m.quota}${windowParameter(m)}`).join(', ')],
      ['RateLimit', list.map((m) => `${sfString(m.name)};r=${m.remaining};t=${m.reset}${partition}`).join(', ')],
    ];
  }
  const m = binding(list);
  const reset = String(m.reset);
  if (form === 'draft-7') {
    return [
      ['RateLimit-Policy', `${m.quota}${windowParameter(m)}`],
      ['RateLimit', `limit=${m.quota}, remaining=${m.remaining}, reset=${reset}`],
    ];
  }
  if (form === 'draft-6') {
    return [
      ['RateLimit-Policy', `${m.quota}${windowParameter(m)}`],
      ['RateLimit-Limit', String(m.quota)],
      ['RateLimit-Remaining', String(m.remaining)],
      ['RateLimit-Reset', reset],
    ];
  }
  return [
    ['X-RateLimit-Limit', String(m.quota)],
    ['X-RateLimit-Remaining', String(m.remaining)],
    ['X-RateLimit-Reset', reset],
  ];
}

module.exports = { HEADER_FORMS, policyShape, members, rateLimitFields };
