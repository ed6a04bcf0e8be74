// Hono on Node (@hono/node-server): 100 requests per minute per client address.
const { Hono } = require('hono');
const { serve } = require('@hono/node-server');
const { Backend } = require('ratekeeper');
const { rateLimiter } = require('ratekeeper/hono');

// Each check waits at most 1 s for Redis; past that the request is answered 503 (Retry-After: 1).
const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { deadlineMs: 1000 });
const app = new Hono();
app.use(rateLimiter({ limiter: backend.window('api', 100, 'minute') }));
app.get('/', (c) => c.text('hello'));

serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000), hostname: '127.0.0.1' }, (info) => {
  console.log(`listening on ${info.port}`);
});
