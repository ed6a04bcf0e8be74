'use strict';
// ratekeeper/hono: `rateLimiter(options)`, a Hono middleware over ratekeeper limiters. The
// options are those of every ratekeeper HTTP adapter (docs/src/guides/http/index.md). The
// default key is the client address as @hono/node-server passes it (`c.env.incoming`); on
// other runtimes give a `keyGenerator`.

const { buildCore, PROBLEM_MEDIA_TYPE } = require('./core.js');

/** The peer address @hono/node-server exposes, or undefined elsewhere. */
function peerAddress(c) {
  const incoming = c.env && c.env.incoming;
  return incoming && incoming.socket ? incoming.socket.remoteAddress : undefined;
}

/**
 * A middleware that checks every request against `options.limiter`, sets the RateLimit
 * header fields and answers a refused request itself (429 problem+json, or 503) — or with
 * `options.handler(c, info)`, which returns the Response. Units are given back (under `count`)
 * and leases released when the handler has returned its Response.
 */
function rateLimiter(options) {
  const core = buildCore(options);
  const middleware = async function rateLimitMiddleware(c, next) {
    const outcome = await core.decide(c, peerAddress(c), (name) => c.req.header(name));
    if (outcome === null) return next();
    for (const [name, value] of outcome.headers) c.header(name, value);
    if (outcome.refused) {
      if (core.handler) return core.handler(c, outcome.info);
      c.header('Content-Type', PROBLEM_MEDIA_TYPE);
      return c.body(JSON.stringify(outcome.problem), outcome.status);
    }
    if (!outcome.pending) return next();
    try {
      await next();
    } finally {
      // Not awaited: the response need not wait for the give-back.
      outcome.complete(c.error ? 500 : c.res.status);
    }
    return undefined;
  };
  Object.defineProperty(middleware, 'shadowRefused', { get: () => core.shadowRefused, enumerable: true });
  return middleware;
}

module.exports = { rateLimiter };
