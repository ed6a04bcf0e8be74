// NestJS on the Fastify platform (@nestjs/platform-fastify): the same guard and decorators as on
// Express — 100 requests per minute per client address on every route, 5 on /login.
require('reflect-metadata');
const { Controller, Get, Post, Module } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { FastifyAdapter } = require('@nestjs/platform-fastify');
const { Backend } = require('ratekeeper');
const { RateLimit, RateLimitGuard, SkipRateLimit } = require('ratekeeper/nestjs');

// Each check waits at most 1 s for Redis; past that the request is answered 503 (Retry-After: 1).
const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { deadlineMs: 1000 });

class AppController {
  hello() {
    return 'hello';
  }
  login() {
    return 'welcome';
  }
  health() {
    return 'ok';
  }
}
const route = (name) => Object.getOwnPropertyDescriptor(AppController.prototype, name);
Controller()(AppController);
Get()(AppController.prototype, 'hello', route('hello'));
Post('login')(AppController.prototype, 'login', route('login'));
RateLimit({ limiter: backend.window('login', 5, 'minute') })(AppController.prototype, 'login', route('login'));
Get('health')(AppController.prototype, 'health', route('health'));
SkipRateLimit()(AppController.prototype, 'health', route('health'));

class AppModule {}
Module({ controllers: [AppController] })(AppModule);

async function main() {
  const app = await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false });
  app.useGlobalGuards(new RateLimitGuard({ limiter: backend.window('api', 100, 'minute') }));
  await app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
  console.log(`listening on ${app.getHttpServer().address().port}`);
}
main();
