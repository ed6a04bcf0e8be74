'use strict';
// HTTP helpers: a decision (or a ratekeeper error) as response headers and a status code.
// Headers follow the IETF RateLimit header fields draft (draft-11's RateLimit-Policy and
// RateLimit by default, as the middleware; draft-7, draft-6, legacy on request) and RFC 9110's
// Retry-After; times are whole seconds, rounded up, so a client
// that waits as told is never early.

// The rules live in the core (`Decision::rate_limit_headers`, `http_seconds`); these are wrappers.
const native = require('./addon.js');

/** Milliseconds as whole seconds, rounded up (exact to the microsecond first). */
function ceilSeconds(ms) {
  return native.httpSeconds(Number(ms));
}

/**
 * The response headers for a decision, draft-11 by default as the HTTP middleware writes them
 * (`RateLimit-Policy: "default";q=5`, `RateLimit: "default";r=0;t=10`; `options.policy` names
 * the item, e.g. the limiter's name), or `options.form` `'draft-7'`, `'draft-6'`
 * (`RateLimit-Limit`, `-Remaining`, `-Reset`), `'legacy'` (`X-RateLimit-*`); when refused,
 * `Retry-After`. Times are whole seconds, rounded up.
 */
function rateLimitHeaders(decision, options) {
  const { form, policy } = options ?? {};
  const pairs = native.httpHeaders(
    Boolean(decision.allowed),
    Number(decision.limit),
    Number(decision.remaining),
    Number(decision.retryAfterMs),
    Number(decision.resetAfterMs),
    form,
    policy == null ? undefined : String(policy),
  );
  const headers = {};
  for (let i = 0; i < pairs.length; i += 2) headers[pairs[i]] = pairs[i + 1];
  return headers;
}

/** `Retry-After` for an `ERR_OVER_LIMIT` error (`{}` for any other error). */
function retryAfterHeaders(error) {
  if (error && error.code === 'ERR_OVER_LIMIT' && typeof error.retryAfterMs === 'number') {
    return { 'Retry-After': String(ceilSeconds(error.retryAfterMs)) };
  }
  return {};
}

/**
 * The HTTP status for a refusal: 429 for a refused decision or `ERR_OVER_LIMIT`, 503 for
 * `ERR_SHED`; `undefined` for an allowed decision or any other error.
 */
function httpStatus(decisionOrError) {
  if (decisionOrError == null) return undefined;
  if (decisionOrError instanceof Error) {
    if (decisionOrError.code === 'ERR_OVER_LIMIT') return 429;
    if (decisionOrError.code === 'ERR_SHED') return 503;
    return undefined;
  }
  return decisionOrError.allowed ? undefined : 429;
}

/** Sets the headers of `rateLimitHeaders(decision, options)` on a Node/Express response. */
function setRateLimitHeaders(response, decision, options) {
  for (const [name, value] of Object.entries(rateLimitHeaders(decision, options))) response.setHeader(name, value);
}

module.exports = { ceilSeconds, rateLimitHeaders, retryAfterHeaders, httpStatus, setRateLimitHeaders };
