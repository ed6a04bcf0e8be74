'use strict';
// What differs between the adapters, on real servers (node:http) and fetch: Fastify's
// `global: false`, a route's options over the plugin's and their check when the route is added;
// Hono's `keyGenerator(c)` and `handler(c, info)`; NestJS's `@UseGuards(RateLimitGuard)` with
// `@RateLimit` on one route only and a guard `handler`.

const test = require('node:test');
const assert = require('node:assert/strict');
const Fastify = require('fastify');
const { Hono } = require('hono');
const { serve } = require('@hono/node-server');
const { Backend, ManualClock } = require('..');
const fastifyRateLimit = require('ratekeeper/fastify');
const { rateLimiter } = require('ratekeeper/hono');

async function statuses(url, n, init) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await fetch(url, init);
    await r.arrayBuffer();
    out.push(r.status);
  }
  return out;
}

test('Fastify: global false limits only routes with config.rateLimit, which inherit the plugin options', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const app = Fastify();
  await app.register(fastifyRateLimit, { global: false, standardHeaders: 'draft-6', keyGenerator: () => 'shared' });
  app.get('/free', async () => 'free');
  app.get('/limited', { config: { rateLimit: { limiter: backend.window('limited', 2, 'minute') } } }, async () => 'limited');
  assert.throws(
    () => app.get('/bad', { config: { rateLimit: { limiter: backend.window('bad', 2, 'minute'), cost: 0 } } }, async () => 'bad'),
    { code: 'ERR_INVALID_ARGUMENT', parameter: 'cost' },
  );
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${app.server.address().port}`;
  try {
    assert.deepEqual(await statuses(`${base}/free`, 4), [200, 200, 200, 200]);
    const r = await fetch(`${base}/limited`);
    assert.equal(r.headers.get('ratelimit-limit'), '2', 'draft-6 inherited from the plugin');
    assert.deepEqual(await statuses(`${base}/limited`, 2), [200, 429]);
  } finally {
    await app.close();
  }
});

test('Fastify: a bad plugin option fails the registration', async () => {
  const app = Fastify();
  app.register(fastifyRateLimit, { limiter: Backend.memory().window('w', 1, 'minute'), standardHeaders: 'draft-8' });
  await assert.rejects(app.ready(), { code: 'ERR_INVALID_ARGUMENT', parameter: 'standardHeaders' });
});

test("Fastify: every way out of the hook — a handler's answer (sync or async), a handler that answers nothing, a keyGenerator's error, count 'failures'", async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const app = Fastify();
  const refusals = [];
  await app.register(fastifyRateLimit, { global: false });
  const route = (path, options, handler = async () => 'ok') =>
    app.get(path, { config: { rateLimit: { keyGenerator: () => path, ...options } } }, handler);
  route('/sync', {
    limiter: backend.window('sync', 1, 'minute'),
    handler: (request, reply, info) => reply.code(info.status).send({ sync: info.violatedPolicies }),
  });
  route('/async', {
    limiter: backend.window('async', 1, 'minute'),
    handler: async (request, reply, info) => {
      await new Promise((resolve) => setImmediate(resolve));
      return reply.code(418).send({ async: info.retryAfterSeconds });
    },
  });
  // A handler that sends nothing lets the request through, as an async hook returning nothing does.
  route('/note', {
    limiter: backend.window('note', 1, 'minute'),
    handler: (request, reply, info) => void refusals.push(info.reason),
  });
  route('/bad-key', { limiter: backend.window('bad-key', 5, 'minute'), keyGenerator: () => 42 });
  const failures = backend.tokenBucket('failures', 1, 1);
  route('/failures', { limiter: failures, count: 'failures' }, async (request, reply) => reply.code(200).send('fine'));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${app.server.address().port}`;
  try {
    assert.deepEqual(await statuses(`${base}/sync`, 2), [200, 429]);
    assert.deepEqual(await (await fetch(`${base}/sync`)).json(), { sync: ['sync'] });
    assert.deepEqual(await statuses(`${base}/async`, 2), [200, 418]);
    assert.deepEqual(await (await fetch(`${base}/async`)).json(), { async: 60 });
    assert.deepEqual(await statuses(`${base}/note`, 3), [200, 200, 200]);
    assert.deepEqual(refusals, ['limited', 'limited']);
    const bad = await fetch(`${base}/bad-key`);
    assert.equal(bad.status, 500, 'the error goes to Fastify');
    assert.match((await bad.json()).message, /keyGenerator/);
    // One unit, and every response succeeds: each is given back once the response is done.
    for (let i = 0; i < 5; i++) {
      assert.equal((await fetch(`${base}/failures`)).status, 200, `request ${i}`);
      for (let wait = 0; wait < 200 && (await failures.peek('/failures')).remaining < 1; wait++) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    assert.equal((await failures.peek('/failures')).remaining, 1);
  } finally {
    await app.close();
  }
});

test('Hono: keyGenerator(c) and handler(c, info)', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const app = new Hono();
  app.use(
    rateLimiter({
      limiter: backend.window('per-user', 1, 'minute'),
      keyGenerator: (c) => c.req.header('x-user') ?? 'anonymous',
      handler: (c, info) => c.json({ slowDown: info.violatedPolicies, retry: info.retryAfterSeconds }, info.status),
    }),
  );
  app.get('/', (c) => c.text('hello'));
  const server = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const url = `http://127.0.0.1:${server.address().port}/`;
  try {
    const as = (user) => ({ headers: { 'x-user': user } });
    assert.deepEqual(await statuses(url, 1, as('ann')), [200]);
    assert.deepEqual(await statuses(url, 1, as('ben')), [200]);
    const refused = await fetch(url, as('ann'));
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '60');
    assert.deepEqual(await refused.json(), { slowDown: ['per-user'], retry: 60 });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

test('NestJS: @UseGuards(RateLimitGuard) limits only the routes with @RateLimit; a guard handler answers', async () => {
  require('reflect-metadata');
  const { Controller, Get, Module, UseGuards } = require('@nestjs/common');
  const { NestFactory } = require('@nestjs/core');
  const { RateLimit, RateLimitGuard } = require('ratekeeper/nestjs');
  const backend = Backend.memory({ clock: new ManualClock() });

  class Routes {
    free() {
      return 'free';
    }
    limited() {
      return 'limited';
    }
    custom() {
      return 'custom';
    }
  }
  const d = (name) => Object.getOwnPropertyDescriptor(Routes.prototype, name);
  Controller()(Routes);
  UseGuards(RateLimitGuard)(Routes);
  Get('free')(Routes.prototype, 'free', d('free'));
  Get('limited')(Routes.prototype, 'limited', d('limited'));
  RateLimit({ limiter: backend.window('limited', 1, 'minute') })(Routes.prototype, 'limited', d('limited'));
  Get('custom')(Routes.prototype, 'custom', d('custom'));
  RateLimit({
    limiter: backend.window('custom', 1, 'minute'),
    handler: (req, res, info) => res.status(info.status).json({ custom: true }),
  })(Routes.prototype, 'custom', d('custom'));
  class AppModule {}
  Module({ controllers: [Routes] })(AppModule);

  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const base = `http://127.0.0.1:${app.getHttpServer().address().port}`;
  try {
    assert.deepEqual(await statuses(`${base}/free`, 3), [200, 200, 200]);
    assert.deepEqual(await statuses(`${base}/limited`, 2), [200, 429]);
    const problem = await fetch(`${base}/limited`);
    assert.equal(problem.headers.get('content-type').split(';')[0], 'application/problem+json');
    assert.deepEqual((await problem.json())['violated-policies'], ['limited']);
    assert.deepEqual(await statuses(`${base}/custom`, 1), [200]);
    const custom = await fetch(`${base}/custom`);
    assert.equal(custom.status, 429);
    assert.deepEqual(await custom.json(), { custom: true });
  } finally {
    await app.close();
  }
});
