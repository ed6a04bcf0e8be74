'use strict';
// ratekeeper/express: `rateLimit(options)`, an Express (or Connect, or plain node:http)
// middleware over ratekeeper limiters. The options are those of every ratekeeper HTTP adapter
// (docs/src/guides/http/index.md); the names follow express-rate-limit where the meaning is
// the same.

const { buildCore, PROBLEM_MEDIA_TYPE } = require('./core.js');
const { onResponseDone } = require('./response-done.js');

/** The default refusal: the status, and an RFC 9457 problem body. */
function sendProblem(req, res, next, info) {
  res.statusCode = info.status;
  res.setHeader('Content-Type', PROBLEM_MEDIA_TYPE);
  res.end(JSON.stringify(info.problem));
}

/**
 * A middleware that checks every request against `options.limiter`, sets the RateLimit
 * header fields, and answers a refused request itself (429 problem+json, or 503) — or with
 * `options.handler(req, res, next, info)`. Throws `ERR_INVALID_ARGUMENT` naming a bad option.
 */
function rateLimit(options) {
  const core = buildCore(options);
  const handler = core.handler ?? sendProblem;
  const middleware = async function rateLimitMiddleware(req, res, next) {
    let outcome;
    try {
      outcome = await core.decide(req, req.socket.remoteAddress, (name) => req.headers[name]);
    } catch (error) {
      return next(error);
    }
    if (outcome === null) return next();
    for (const [name, value] of outcome.headers) res.setHeader(name, value);
    if (outcome.refused) {
      try {
        return await handler(req, res, next, outcome.info);
      } catch (error) {
        return next(error);
      }
    }
    if (outcome.pending) onResponseDone(res, (status) => outcome.complete(status));
    return next();
  };
  Object.defineProperty(middleware, 'shadowRefused', { get: () => core.shadowRefused, enumerable: true });
  return middleware;
}

module.exports = { rateLimit };
