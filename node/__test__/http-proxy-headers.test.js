'use strict';
// A client cannot choose its own rate-limit key behind a trusted proxy (issue #41, items 1-3),
// on every adapter behind node:http: Express, Fastify, Hono (@hono/node-server), NestJS on
// Express and on Fastify. The test plays a trusted proxy on 127.0.0.1 in front of one client,
// which sends 10 requests against 2 a minute (a manual clock: the window never moves), varying
// a header the proxy does not strip: `Forwarded: for=<random>` beside the proxy's constant
// `X-Forwarded-For` (nginx, ALB and HAProxy append to X-Forwarded-For and pass Forwarded
// through), or its own `X-Forwarded-For` line followed by the one the proxy adds (HAProxy). The
// requests are written on a raw socket, so each header line reaches the server as sent.

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const express = require('express');
const Fastify = require('fastify');
const { Hono } = require('hono');
const { serve } = require('@hono/node-server');
const { Backend, ManualClock } = require('..');
const { rateLimit } = require('ratekeeper/express');
const fastifyRateLimit = require('ratekeeper/fastify');
const { rateLimiter } = require('ratekeeper/hono');

const LIMIT = 2;
const REQUESTS = 10;

/** A fresh address per request, never a trusted proxy. */
function spoofed() {
  return `198.18.${Math.floor(Math.random() * 256)}.${1 + Math.floor(Math.random() * 254)}`;
}

/** One request's header lines as the app receives them from the proxy, in order. */
const SCENARIOS = {
  'Forwarded varied beside the proxy X-Forwarded-For': {
    client: '203.0.113.7',
    lines: (client) => [`Forwarded: for=${spoofed()}`, `X-Forwarded-For: ${client}`],
  },
  'a client X-Forwarded-For line before the proxy line': {
    client: '203.0.113.8',
    lines: (client) => [`X-Forwarded-For: ${spoofed()}`, `X-Forwarded-For: ${client}`],
  },
  'proxyHeader Forwarded: X-Forwarded-For varied, a client Forwarded line before the proxy line': {
    client: '203.0.113.9',
    options: { proxyHeader: 'Forwarded' },
    lines: (client) => [`X-Forwarded-For: ${spoofed()}`, `Forwarded: for=${spoofed()}`, `Forwarded: for="${client}:4711";proto=http`],
  },
};

/** GET / on 127.0.0.1:`port` with these header lines, written as they are; resolves with the status. */
function rawGet(port, lines) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let reply = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => (reply += d));
    socket.on('error', reject);
    socket.on('end', () => {
      const match = /^HTTP\/1\.1 (\d{3})/.exec(reply);
      if (match) resolve(Number(match[1]));
      else reject(new Error(`no status line in ${JSON.stringify(reply.slice(0, 200))}`));
    });
    socket.write(['GET / HTTP/1.1', 'Host: 127.0.0.1', ...lines, 'Connection: close', '', ''].join('\r\n'));
  });
}

/** Each adapter on a free port of 127.0.0.1 with `options`; resolves with { port, close() }. */
const FRAMEWORKS = {
  async Express(options) {
    const app = express();
    app.use(rateLimit(options));
    app.get('/', (req, res) => res.send('hello'));
    const server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    return { port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) };
  },
  async Fastify(options) {
    const app = Fastify();
    await app.register(fastifyRateLimit, options);
    app.get('/', async () => 'hello');
    await app.listen({ port: 0, host: '127.0.0.1' });
    return { port: app.server.address().port, close: () => app.close() };
  },
  async 'Hono (@hono/node-server)'(options) {
    const app = new Hono();
    app.use(rateLimiter(options));
    app.get('/', (c) => c.text('hello'));
    const server = await new Promise((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
    });
    return { port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) };
  },
  'NestJS (Express platform)': (options) => nest(options, null),
  'NestJS (Fastify platform)': (options) => nest(options, 'fastify'),
};

async function nest(options, platform) {
  require('reflect-metadata');
  const { Controller, Get, Module } = require('@nestjs/common');
  const { NestFactory } = require('@nestjs/core');
  const { RateLimitGuard } = require('ratekeeper/nestjs');
  class Routes {
    hello() {
      return 'hello';
    }
  }
  Controller()(Routes);
  Get()(Routes.prototype, 'hello', Object.getOwnPropertyDescriptor(Routes.prototype, 'hello'));
  class AppModule {}
  Module({ controllers: [Routes] })(AppModule);
  const adapter = platform === 'fastify' ? [new (require('@nestjs/platform-fastify').FastifyAdapter)()] : [];
  const app = await NestFactory.create(AppModule, ...adapter, { logger: false });
  app.useGlobalGuards(new RateLimitGuard(options));
  await app.listen(0, '127.0.0.1');
  return { port: app.getHttpServer().address().port, close: () => app.close() };
}

for (const [framework, start] of Object.entries(FRAMEWORKS)) {
  for (const [scenario, { client, options = {}, lines }] of Object.entries(SCENARIOS)) {
    test(`${framework}: a client varying ${scenario} behind a trusted proxy is one client`, async () => {
      const limiter = Backend.memory({ clock: new ManualClock() }).window('proxied', LIMIT, 'minute');
      const app = await start({ limiter, trustedProxies: ['127.0.0.1'], ...options });
      try {
        const statuses = [];
        for (let i = 0; i < REQUESTS; i++) statuses.push(await rawGet(app.port, lines(client)));
        assert.deepEqual(
          { admitted: statuses.filter((s) => s === 200).length, refused: statuses.filter((s) => s === 429).length },
          { admitted: LIMIT, refused: REQUESTS - LIMIT },
          `statuses: ${statuses}`,
        );
        assert.equal((await limiter.peek(client)).remaining, 0, "counted under the proxy's address for the client");
      } finally {
        await app.close();
      }
    });
  }
}

// The documented example (examples/node/http/behind-proxy.cjs, docs/src/guides/http/node.md)
// as its own process on a real Redis, for each deployment it names: what each sends the app
// when the client forges a Forwarded header and X-Forwarded-For entries of its own, each proxy
// appending the address it was connected from.
const DEPLOYMENTS = {
  nginx: () => [`Forwarded: for=${spoofed()}`, `X-Forwarded-For: ${spoofed()}, 203.0.113.7`],
  alb: () => [`Forwarded: for=${spoofed()}`, `X-Forwarded-For: ${spoofed()}, 203.0.113.7`],
  // Cloudflare appends the client, then nginx appends Cloudflare's edge (173.245.48.5).
  cloudflare: () => [`Forwarded: for=${spoofed()}`, `X-Forwarded-For: ${spoofed()}, 203.0.113.7, 173.245.48.5`],
};

for (const [deployment, lines] of Object.entries(DEPLOYMENTS)) {
  test(`the behind-a-proxy example, behind ${deployment}: 2 of 10 admitted, counted under the client`, async () => {
    const { RedisServer } = require('./support/redis.js');
    const { startApp } = require('./support/http-apps.js');
    const redis = await RedisServer.start();
    const url = `redis://127.0.0.1:${redis.port}`;
    // The ALB's VPC is the loopback network here: the test connects from 127.0.0.1.
    const app = await startApp('behind-proxy.cjs', { REDIS_URL: url, API_LIMIT: String(LIMIT), PROXY: deployment, VPC_CIDR: '127.0.0.0/8' });
    try {
      const started = Date.now();
      const statuses = [];
      for (let i = 0; i < REQUESTS; i++) statuses.push(await rawGet(app.port, lines()));
      // A window limiter admits at most LIMIT in any minute: LIMIT per minute the run touched.
      const minutes = Math.floor(Date.now() / 60_000) - Math.floor(started / 60_000) + 1;
      const admitted = statuses.filter((s) => s === 200).length;
      assert.ok(admitted >= 1 && admitted <= LIMIT * minutes, `statuses: ${statuses}`);
      assert.equal(statuses.filter((s) => s !== 200 && s !== 429).length, 0, `statuses: ${statuses}`);
      const limiter = Backend.redis(url).window('api', LIMIT, 'minute');
      assert.ok((await limiter.peek('203.0.113.7')).remaining < LIMIT, "counted under the client's address");
    } finally {
      await app.stop();
      await redis.destroy();
    }
  });
}
