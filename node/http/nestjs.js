'use strict';
// ratekeeper/nestjs: a guard (`RateLimitGuard`) and decorators (`@RateLimit(options)`,
// `@SkipRateLimit()`) over ratekeeper limiters, on Nest's Express or Fastify platform. The
// options are those of every ratekeeper HTTP adapter (docs/src/guides/http/index.md).

const { HttpException, Injectable, SetMetadata } = require('@nestjs/common');
const { buildCore, PROBLEM_MEDIA_TYPE } = require('./core.js');
const { onResponseDone } = require('./response-done.js');

/** Metadata keys: a route's (or controller's) core, and its exemption. */
const RATE_LIMIT = Symbol.for('ratekeeper.nestjs.rate-limit');
const SKIP_RATE_LIMIT = Symbol.for('ratekeeper.nestjs.skip-rate-limit');

/**
 * Limits a route (method decorator) or every route of a controller (class decorator) with
 * `options`, validated here, when the class is defined (`ERR_INVALID_ARGUMENT`). A route's
 * options replace the guard's and the controller's; they are not merged.
 */
function RateLimit(options) {
  return SetMetadata(RATE_LIMIT, buildCore(options));
}

/** Exempts a route or a controller: the guard touches nothing for it. */
function SkipRateLimit() {
  return SetMetadata(SKIP_RATE_LIMIT, true);
}

/** The refusal Nest's exception layer answers: the problem body as application/problem+json. */
class RateLimitException extends HttpException {
  constructor(info) {
    super(info.problem, info.status);
    this.info = info;
  }
}

function metadata(key, context) {
  return Reflect.getMetadata(key, context.getHandler()) ?? Reflect.getMetadata(key, context.getClass());
}

/**
 * The guard. `new RateLimitGuard(options)` (e.g. `app.useGlobalGuards(...)`) limits every
 * route with `options`; `@UseGuards(RateLimitGuard)` limits only routes and controllers that
 * carry `@RateLimit(...)`. A refused request throws a `RateLimitException` (429, or 503).
 */
class RateLimitGuard {
  constructor(options) {
    this.core = options === undefined ? null : buildCore(options);
  }

  async canActivate(context) {
    if (context.getType() !== 'http' || metadata(SKIP_RATE_LIMIT, context) === true) return true;
    const core = metadata(RATE_LIMIT, context) ?? this.core;
    if (core == null) return true;
    const http = context.switchToHttp();
    const request = http.getRequest();
    const response = http.getResponse();
    const raw = response.raw ?? response; // Fastify's reply wraps the node:http response
    const socket = (request.raw ?? request).socket;
    const outcome = await core.decide(request, socket && socket.remoteAddress, (name) => request.headers[name]);
    if (outcome === null) return true;
    for (const [name, value] of outcome.headers) raw.setHeader(name, value);
    if (outcome.refused) {
      if (core.handler) {
        await core.handler(request, response, outcome.info);
        return false;
      }
      raw.setHeader('Content-Type', PROBLEM_MEDIA_TYPE);
      throw new RateLimitException(outcome.info);
    }
    if (outcome.pending) onResponseDone(raw, (status) => outcome.complete(status));
    return true;
  }
}
Injectable()(RateLimitGuard);

module.exports = { RateLimit, SkipRateLimit, RateLimitGuard, RateLimitException, RATE_LIMIT, SKIP_RATE_LIMIT };
