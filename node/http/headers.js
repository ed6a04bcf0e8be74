'use strict';
// The RateLimit header fields of a request's decisions, in each form the middleware offers:
// draft-11 (default; `RateLimit-Policy` and `RateLimit` as Structured Field lists, one member
// per limit), draft-7 (one `RateLimit` field), draft-6 (three fields) and legacy
// (`X-RateLimit-*`). Seconds are whole and rounded up, so a client that waits as told is never
// early. The forms are described in docs/src/guides/http/index.md.

const { ceilSeconds } = require('../index.js');

/** The header forms `standardHeaders` accepts (false: none). */
const HEADER_FORMS = ['draft-11', 'draft-7', 'draft-6', 'legacy'];

/** Seconds that a window of `seconds` spans in a policy: a whole number, at least 1. */
function windowSeconds(seconds) {
  return Math.max(1, Math.ceil(seconds - 1e-9));
}

/**
 * What a limiter's spec says of its policy, read once when the middleware is built: the window
 * of each of its limits in seconds (null: none to state) and its quota unit.
 */
function policyShape(limiter) {
  const spec = limiter.spec;
  switch (spec.kind) {
    case 'token_bucket':
    case 'leased':
      return { windows: [windowSeconds(spec.capacity / spec.rate)] };
    case 'leaky':
      return { windows: [windowSeconds(spec.drain)] };
    case 'points':
      return { windows: [windowSeconds(spec.refill)] };
    case 'bucket':
    case 'window':
      return { windows: [windowSeconds(spec.interval)] };
    case 'windows':
      return { windows: spec.windows.map(([, interval]) => windowSeconds(interval)) };
    case 'sliding_window':
      return { windows: spec.limits.map(([duration]) => windowSeconds(duration)) };
    case 'concurrent':
      return { windows: [null], unit: 'concurrent-requests' };
    case 'unlimited':
      return null; // nothing binds: no policy to announce
    default:
      return { windows: [null] }; // calendar (days vary in length), partitions
  }
}

/**
 * The policy members of one limiter's decision: one per limit (a multi-limit limiter reports
 * each, named `name-<window>s`), with quota, window, remaining and seconds until restored.
 */
function members(name, shape, decision) {
  if (shape === null) return [];
  const limits = decision.limits;
  if (Array.isArray(limits) && limits.length > 1) {
    return limits.map((limit, i) => ({
      name: `${name}-${shape.windows[i] ?? Math.ceil(limit.windowMs / 1000)}s`,
      quota: Math.floor(limit.limit),
      window: shape.windows[i] ?? windowSeconds(limit.windowMs / 1000),
      remaining: Math.max(0, Math.floor(limit.remaining)),
      reset: ceilSeconds(limit.resetAfterMs),
      unit: shape.unit,
    }));
  }
  return [
    {
      name,
      quota: Math.floor(decision.limit),
      window: shape.windows[0],
      remaining: Math.max(0, Math.floor(decision.remaining)),
      reset: shape.unit === 'concurrent-requests' ? null : ceilSeconds(decision.resetAfterMs),
      unit: shape.unit,
    },
  ];
}

/** The member whose remaining share is smallest: the one the single-limit forms report. */
function tightest(list) {
  let best = list[0];
  for (const m of list) if (m.remaining / (m.quota || 1) < best.remaining / (best.quota || 1)) best = m;
  return best;
}

/** `;w=60` for a member with a window. */
function windowParameter(member) {
  return member.window === null ? '' : `;w=${member.window}`;
}

/** The `[name, value]` header pairs of `list` (policy members) in `form`. */
function rateLimitFields(form, list) {
  if (form === false || list.length === 0) return [];
  if (form === 'draft-11') {
    const policy = list
      .map((m) => `"${m.name}";q=${m.quota}${windowParameter(m)}${m.unit ? `;qu="${m.unit}"` : ''}`)
      .join(', ');
    const state = list.map((m) => `"${m.name}";r=${m.remaining}${m.reset === null ? '' : `;t=${m.reset}`}`).join(', ');
    return [
      ['RateLimit-Policy', policy],
      ['RateLimit', state],
    ];
  }
  const m = tightest(list);
  const reset = String(m.reset ?? 0);
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
