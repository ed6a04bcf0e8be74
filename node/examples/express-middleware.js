'use strict';
// An Express-style rate-limiting middleware (works with Express, Connect, or plain
// `http.createServer((req, res) => middleware(req, res, next))`).
//
//   const express = require('express');
//   const { Backend } = require('ratekeeper');
//   const { rateLimit } = require('./express-middleware');
//
//   const backend = Backend.redis(process.env.REDIS_URL);   // or Backend.memory()
//   const app = express();
//   app.use(rateLimit(backend.tokenBucket('api', 10, 20)));  // 10/s per client, bursts of 20
//   app.get('/', (req, res) => res.send('hello'));

const { setRateLimitHeaders } = require('ratekeeper');

function rateLimit(limiter, { key = (req) => req.ip ?? req.socket.remoteAddress, cost = () => 1 } = {}) {
  return async function rateLimitMiddleware(req, res, next) {
    let decision;
    try {
      decision = await limiter.check(key(req), cost(req));
    } catch (error) {
      return next(error); // backend unavailable under fail_closed: let the app decide
    }
    setRateLimitHeaders(res, decision); // RateLimit-* and, when refused, Retry-After
    if (decision.allowed) return next();
    res.statusCode = 429;
    res.end('Too Many Requests');
  };
}

module.exports = { rateLimit };
