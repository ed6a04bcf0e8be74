'use strict';
// HTTP helpers: a decision (or a ratekeeper error) as response headers and a status code.
// Headers follow the IETF RateLimit header fields draft (RateLimit-Limit, RateLimit-Remaining,
// RateLimit-Reset) and RFC 9110's Retry-After; times are whole seconds, rounded up, so a client
// that waits as told is never early.

// The rules live in the core (`Decision::http_headers`, `http_seconds`); these are wrappers.
const native = require('./addon.js');

/** Milliseconds as whole seconds, rounded up (exact to the microsecond first). */
function ceilSeconds(ms) {
  return native.httpSeconds(Number(ms));
}

/**
 * The response headers for a decision: `RateLimit-Limit`, `RateLimit-Remaining`,
 * `RateLimit-Reset` (seconds until the limit is full again) and, when refused, `Retry-After`.
 */
function rateLimitHeaders(decision) {
  const pairs = native.httpHeaders(
    Boolean(decision.allowed),
    Number(decision.limit),
    Number(decision.remaining),
    Number(decision.retryAfterMs),
    Number(decision.resetAfterMs),
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

/** Sets the headers of `rateLimitHeaders(decision)` on a Node/Express response. */
function setRateLimitHeaders(response, decision) {
  for (const [name, value] of Object.entries(rateLimitHeaders(decision))) response.setHeader(name, value);
}

module.exports = { ceilSeconds, rateLimitHeaders, retryAfterHeaders, httpStatus, setRateLimitHeaders };
