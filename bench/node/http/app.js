'use strict';
// One server of the HTTP benchmark (bench.js starts it): FRAMEWORK (express, fastify, hono,
// nestjs) with VARIANT `floor` (no limiter), `ratekeeper` (ratekeeper/<framework> on Redis) or
// `peer` (the framework's usual rate-limit package on the same Redis). Every variant limits by
// client address with a fixed window of one minute, far above the load: every request is
// admitted, so the figures are the cost of an admitted request. Prints `listening on PORT`.

const path = require('node:path');

const { FRAMEWORK, VARIANT, REDIS_URL } = process.env;
const LIMIT = 1_000_000_000;
const WINDOW_MS = 60_000;
const root = path.resolve(__dirname, '..', '..', '..');
const rk = () => require(path.join(root, 'node'));
const rkHttp = (name) => require(path.join(root, 'node', 'http', `${name}.js`));
const ioredis = () => {
  const Redis = require('ioredis');
  return new Redis(REDIS_URL);
};
/** ratekeeper's fixed window, the algorithm of every peer here. */
// A long deadline: on a loaded machine a 503 would stop the run (the peers have none).
const rkLimiter = () => rk().Backend.redis(REDIS_URL, { deadlineMs: 5000 }).bucket('bench', LIMIT, `${WINDOW_MS}ms`);
const ready = (port) => console.log(`listening on ${port}`);

async function express() {
  const app = require('express')();
  if (VARIANT === 'ratekeeper') app.use(rkHttp('express').rateLimit({ limiter: rkLimiter() }));
  if (VARIANT === 'peer') {
    const { rateLimit } = require('express-rate-limit');
    const { RedisStore } = require('rate-limit-redis');
    const redis = ioredis();
    app.use(rateLimit({ windowMs: WINDOW_MS, limit: LIMIT, standardHeaders: 'draft-7', legacyHeaders: false,
      store: new RedisStore({ sendCommand: (command, ...args) => redis.call(command, ...args) }) }));
  }
  app.get('/', (req, res) => res.send('hello'));
  const server = app.listen(0, '127.0.0.1', () => ready(server.address().port));
}

async function fastify() {
  const app = require('fastify')();
  if (VARIANT === 'ratekeeper') await app.register(rkHttp('fastify'), { limiter: rkLimiter() });
  if (VARIANT === 'peer') await app.register(require('@fastify/rate-limit'), { max: LIMIT, timeWindow: WINDOW_MS, redis: ioredis() });
  app.get('/', async () => 'hello');
  await app.listen({ port: 0, host: '127.0.0.1' });
  ready(app.server.address().port);
}

async function hono() {
  const { Hono } = require('hono');
  const { serve } = require('@hono/node-server');
  const app = new Hono();
  if (VARIANT === 'ratekeeper') app.use(rkHttp('hono').rateLimiter({ limiter: rkLimiter() }));
  if (VARIANT === 'peer') {
    const { rateLimiter } = require('hono-rate-limiter');
    const { RedisStore } = require('@hono-rate-limiter/redis');
    const redis = ioredis();
    // @hono-rate-limiter/redis speaks to Upstash-style clients: ioredis adapted to it.
    const client = {
      scriptLoad: (script) => redis.script('LOAD', script),
      evalsha: (sha, keys, args) => redis.evalsha(sha, keys.length, ...keys, ...args),
      decr: (key) => redis.decr(key),
      del: (key) => redis.del(key),
    };
    app.use(rateLimiter({ windowMs: WINDOW_MS, limit: LIMIT, standardHeaders: 'draft-7',
      keyGenerator: (c) => c.env.incoming.socket.remoteAddress, store: new RedisStore({ client }) }));
  }
  app.get('/', (c) => c.text('hello'));
  serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => ready(info.port));
}

async function nestjs() {
  require('reflect-metadata');
  const { Controller, Get, Module } = require('@nestjs/common');
  const { NestFactory, APP_GUARD } = require('@nestjs/core');
  class AppController {
    hello() {
      return 'hello';
    }
  }
  Controller()(AppController);
  Get()(AppController.prototype, 'hello', Object.getOwnPropertyDescriptor(AppController.prototype, 'hello'));
  const imports = [];
  const providers = [];
  if (VARIANT === 'peer') {
    const { ThrottlerModule, ThrottlerGuard } = require('@nestjs/throttler');
    const { ThrottlerStorageRedisService } = require('@nest-lab/throttler-storage-redis');
    imports.push(ThrottlerModule.forRoot({ throttlers: [{ ttl: WINDOW_MS, limit: LIMIT }], storage: new ThrottlerStorageRedisService(ioredis()) }));
    providers.push({ provide: APP_GUARD, useClass: ThrottlerGuard });
  }
  class AppModule {}
  Module({ imports, controllers: [AppController], providers })(AppModule);
  const app = await NestFactory.create(AppModule, { logger: false });
  if (VARIANT === 'ratekeeper') app.useGlobalGuards(new (rkHttp('nestjs').RateLimitGuard)({ limiter: rkLimiter() }));
  await app.listen(0, '127.0.0.1');
  ready(app.getHttpServer().address().port);
}

({ express, fastify, hono, nestjs })[FRAMEWORK]();
