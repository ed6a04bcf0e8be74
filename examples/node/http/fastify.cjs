// Fastify: 100 requests per minute per client address on every route, 5 on /login.
const Fastify = require('fastify');
const { Backend } = require('ratekeeper');
const rateLimit = require('ratekeeper/fastify');

// Each check waits at most 1 s for Redis; past that the request is answered 503 (Retry-After: 1).
const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { deadlineMs: 1000 });
const app = Fastify();
app.register(rateLimit, { limiter: backend.window('api', 100, 'minute') });
app.register(async (routes) => {
  routes.get('/', async () => 'hello');
  routes.post('/login', { config: { rateLimit: { limiter: backend.window('login', 5, 'minute') } } }, async () => 'welcome');
  routes.get('/health', { config: { rateLimit: false } }, async () => 'ok');
});

app.listen({ port: Number(process.env.PORT ?? 3000), host: '127.0.0.1' }).then(() => {
  console.log(`listening on ${app.server.address().port}`);
});
