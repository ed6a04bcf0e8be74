// The typings of ratekeeper/express, /fastify, /hono and /nestjs under `tsc --strict`,
// imported by the package's own name as a user's code does (package.json "exports").
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { Controller, Get, UseGuards } from '@nestjs/common';
import { Backend, FleetShedder } from 'ratekeeper';
import { rateLimit, type RefusalInfo } from 'ratekeeper/express';
import fastifyRateLimit from 'ratekeeper/fastify';
import { rateLimiter } from 'ratekeeper/hono';
import { RateLimit, RateLimitGuard, SkipRateLimit, RateLimitException } from 'ratekeeper/nestjs';

const backend = Backend.memory();
const api = backend.window('api', 100, 'minute');

// Express: every option.
const app = express();
const middleware = rateLimit({
  limiter: [api, backend.tokenBucket('burst', 10, 20), new FleetShedder(backend, 'fleet', 100)],
  keyGenerator: (req) => String(req.headers['x-api-key'] ?? ''),
  cost: (req) => (req.method === 'POST' ? 5 : 1),
  skip: async (req) => req.url === '/health',
  count: 'failures',
  requestWasSuccessful: (status) => status < 500,
  standardHeaders: 'draft-7',
  handler: (req, res, next, info: RefusalInfo) => {
    res.statusCode = info.status;
    res.end(`retry in ${info.retryAfterSeconds}s (${info.violatedPolicies.join(', ')}) for ${req.url}`);
    void next;
  },
  shadow: false,
  trustedProxies: ['127.0.0.1', '10.0.0.0/8'],
  proxyHeader: 'Forwarded',
});
app.use(middleware);
const refusedInShadow: number = middleware.shadowRefused;
rateLimit({ limiter: api, partitionKeySecret: new TextEncoder().encode('a-secret-of-at-least-16-bytes') });
// @ts-expect-error: the secret is text or bytes
rateLimit({ limiter: api, partitionKeySecret: 12345 });
// @ts-expect-error: an unknown header form
rateLimit({ limiter: api, standardHeaders: 'draft-8' });
// @ts-expect-error: the proxy header is X-Forwarded-For or Forwarded
rateLimit({ limiter: api, proxyHeader: 'X-Real-IP' });
// @ts-expect-error: count is one of three words
rateLimit({ limiter: api, count: 'some' });
// @ts-expect-error: the limiter is required
rateLimit({ cost: 1 });

// Fastify: global options and a route's own.
const fastify = Fastify();
fastify.register(fastifyRateLimit, { limiter: api, global: true });
fastify.get('/login', { config: { rateLimit: { limiter: backend.window('login', 5, 'minute'), count: 'failures' } } }, async () => 'ok');
fastify.get('/health', { config: { rateLimit: false } }, async () => 'ok');
fastify.get('/x', { config: { rateLimit: { handler: (request, reply, info) => reply.code(info.status).send(request.url) } } }, async () => 'x');

// Hono.
const hono = new Hono();
hono.use(rateLimiter({ limiter: api, keyGenerator: (c) => c.req.header('x-user') ?? 'anonymous', handler: (c, info) => c.text('slow down', info.status) }));

// NestJS.
@Controller()
@UseGuards(RateLimitGuard)
@RateLimit({ limiter: api })
export class Routes {
  @Get()
  hello(): string {
    return 'hello';
  }

  @Get('health')
  @SkipRateLimit()
  health(): string {
    return 'ok';
  }
}
const guard = new RateLimitGuard({ limiter: api, shadow: true });
const refusal = (info: RefusalInfo): RateLimitException => new RateLimitException(info);

export { refusedInShadow, guard, refusal };
