// Express: 100 requests per minute per client address, shared by every process on one Redis.
const express = require('express');
const { Backend } = require('ratekeeper');
const { rateLimit } = require('ratekeeper/express');

// Each check waits at most 1 s for Redis; past that the request is answered 503 (Retry-After: 1).
const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { deadlineMs: 1000 });
const app = express();
app.use(rateLimit({ limiter: backend.window('api', 100, 'minute') }));
app.get('/', (req, res) => res.send('hello'));

const server = app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.log(`listening on ${server.address().port}`);
});
