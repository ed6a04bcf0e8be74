'use strict';
// ratekeeper/express, /fastify, /hono and /nestjs as users run them: each example app of
// examples/node/http/ started as its own process on node:http, several client processes at
// once against a limit shared through one real Redis (exact counts of 200 and 429), the
// RateLimit header fields read by a Structured Fields parser, per-route limits and exemptions,
// and a Redis that stops answering (failed closed: 503 with a short Retry-After, never 500).

const test = require('node:test');
const assert = require('node:assert/strict');
const { RedisServer } = require('./support/redis.js');
const { startApp, hammer } = require('./support/http-apps.js');

/** A response's draft-11 fields, parsed: { policy: Map(name → params), state: Map(name → params) }. */
async function draft11(response) {
  const { parseList } = await import('structured-headers');
  const read = (field) => {
    const value = response.headers.get(field);
    assert.ok(value, `${field} is missing`);
    return new Map(parseList(value).map(([name, params]) => [name, Object.fromEntries(params)]));
  };
  return { policy: read('ratelimit-policy'), state: read('ratelimit') };
}

async function assertProblem(response, status, type) {
  assert.equal(response.status, status);
  assert.equal(response.headers.get('content-type').split(';')[0], 'application/problem+json');
  const retryAfter = response.headers.get('retry-after');
  assert.match(retryAfter, /^[1-9]\d*$/, 'Retry-After is a whole number of seconds');
  const body = await response.json();
  assert.equal(body.status, status);
  if (type) assert.equal(body.type, `https://iana.org/assignments/http-problem-types#${type}`);
  return { body, retryAfter: Number(retryAfter) };
}

for (const { framework, file, routes } of [
  { framework: 'Express', file: 'express.cjs', routes: false },
  { framework: 'Fastify', file: 'fastify.cjs', routes: true },
  { framework: 'Hono (@hono/node-server)', file: 'hono.cjs', routes: false },
  { framework: 'NestJS', file: 'nestjs.cjs', routes: true },
  { framework: 'NestJS on Fastify (@nestjs/platform-fastify)', file: 'nestjs-fastify.cjs', routes: true },
]) {
  test(`${framework}: 4 client processes share 100/minute through Redis; 503 when Redis is gone`, async () => {
    const redis = await RedisServer.start();
    const app = await startApp(file, { REDIS_URL: `redis://127.0.0.1:${redis.port}` });
    try {
      const first = await fetch(`${app.url}/`);
      assert.equal(first.status, 200);
      assert.equal(await first.text(), 'hello');
      const { policy, state } = await draft11(first);
      assert.deepEqual(policy.get('api'), { q: 100, w: 60 });
      assert.equal(state.get('api').r, 99);
      assert.ok(state.get('api').t >= 1 && state.get('api').t <= 60);

      // 160 requests from 4 processes at once: exactly the 99 left are admitted.
      const totals = await hammer(`${app.url}/`, { processes: 4, requests: 40, concurrency: 2 });
      assert.deepEqual(totals, { 200: 99, 429: 61 });

      const refused = await fetch(`${app.url}/`);
      const { body, retryAfter } = await assertProblem(refused, 429, 'quota-exceeded');
      assert.deepEqual(body['violated-policies'], ['api']);
      assert.ok(retryAfter >= 1 && retryAfter <= 60);
      assert.equal((await draft11(refused)).state.get('api').r, 0);

      if (routes) {
        // /login has its own 5/minute; /health is exempt and carries no fields.
        const logins = await hammer(`${app.url}/login`, { processes: 2, requests: 4, method: 'POST' });
        assertLogins(logins);
        const health = await fetch(`${app.url}/health`);
        assert.equal(health.status, 200);
        assert.equal(health.headers.get('ratelimit'), null);
      }

      await redis.destroy();
      const unavailable = await fetch(`${app.url}/`);
      const problem = await assertProblem(unavailable, 503);
      assert.equal(problem.retryAfter, 1);
    } finally {
      await app.stop();
      await redis.destroy();
    }
  });
}

/** 8 logins against 5/minute (Nest answers a POST with 201, Fastify with 200). */
function assertLogins(counts) {
  const ok = (counts[200] ?? 0) + (counts[201] ?? 0);
  assert.deepEqual({ ok, refused: counts[429], total: Object.values(counts).reduce((a, b) => a + b) }, { ok: 5, refused: 3, total: 8 });
}
