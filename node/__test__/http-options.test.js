'use strict';
// The options of ratekeeper's HTTP middleware, through a real Express server on node:http and
// real fetch clients: header forms read by real parsers (structured-headers for draft-11,
// ratelimit-header-parser for drafts 6 and 7 and the legacy fields), several limiters (all
// must pass; a refused request is not charged elsewhere), cost, skip, count after the
// response, shadow, handler, keyGenerator, trusted proxies and the IPv6 /56 key, concurrent
// leases and shedder slots given back, fail_open, and Retry-After rounded up.

const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const { Backend, FleetShedder, ManualClock } = require('..');
const { rateLimit } = require('../http/express.js');
const { freePort, waitUntil } = require('./support/redis.js');

/** An Express app with `rateLimit(options)` and `routes(app)`, on a free port of `host`. */
async function serve(options, routes = (app) => app.all('/', (req, res) => res.send('ok')), host = '127.0.0.1') {
  const app = express();
  const middleware = rateLimit(options);
  app.use(middleware);
  routes(app);
  const server = await new Promise((resolve) => {
    const s = app.listen(0, host, () => resolve(s));
  });
  const base = host.includes(':') ? `http://[${host}]:${server.address().port}` : `http://127.0.0.1:${server.address().port}`;
  return {
    middleware,
    get: (path = '/', init = {}) => fetch(`${base}${path}`, init),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

async function statuses(app, n, path = '/', init = {}) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await app.get(path, init);
    await r.arrayBuffer();
    out.push(r.status);
  }
  return out;
}

async function sf(response, field) {
  const { parseList } = await import('structured-headers');
  return parseList(response.headers.get(field)).map(([name, params]) => [name, Object.fromEntries(params)]);
}

test('draft-11: one RateLimit-Policy and RateLimit member per limit of every limiter', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const app = await serve({
    limiter: [backend.tokenBucket('burst', 1, 10), backend.windows('steady', [{ limit: 50, intervalMs: 60_000 }, { limit: 1000, intervalMs: 86_400_000 }])],
  });
  try {
    const r = await app.get();
    assert.equal(r.status, 200);
    assert.deepEqual(await sf(r, 'ratelimit-policy'), [
      ['burst', { q: 10, w: 10 }],
      ['steady/60s', { q: 50, w: 60 }],
      ['steady/86400s', { q: 1000, w: 86400 }],
    ]);
    assert.deepEqual(await sf(r, 'ratelimit'), [
      ['burst', { r: 9, t: 1 }],
      ['steady/60s', { r: 49, t: 60 }],
      ['steady/86400s', { r: 999, t: 86400 }],
    ]);
  } finally {
    await app.close();
  }
});

// The partition key of a key under a secret, as Python's middleware computes it too (the same
// vector is in py/tests/test_http_options.py): the first 16 bytes of HMAC-SHA256(secret, key).
const PK_SECRET = 'a-secret-of-at-least-16-bytes';
const PK_OF = { 'user-42': 'kkSzpvOQVe/EiDuWzJQTlg==', '203.0.113.7': 'gX8SmNME1631O1g30Jsyag==' };

test('draft-11 pk: a keyed hash of the key, never the key, when partitionKeySecret is given', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const limiter = backend.tokenBucket('pk', 1, 10);
  const app = await serve({ limiter, keyGenerator: (req) => req.get('x-user'), partitionKeySecret: PK_SECRET });
  const plain = await serve({ limiter: backend.tokenBucket('no-pk', 1, 10), keyGenerator: (req) => req.get('x-user') });
  try {
    const pkOf = async (user, server = app) => {
      const r = await server.get('/', { headers: { 'x-user': user } });
      assert.equal(r.status, 200);
      assert.ok(!r.headers.get('ratelimit').includes(user), 'the raw key is never sent');
      const [[name, params]] = await sf(r, 'ratelimit');
      assert.equal(name, server === app ? 'pk' : 'no-pk');
      return params.pk === undefined ? undefined : Buffer.from(params.pk).toString('base64');
    };
    assert.equal(await pkOf('user-42'), PK_OF['user-42'], 'HMAC-SHA256(secret, key), first 16 bytes');
    assert.equal(await pkOf('user-42'), PK_OF['user-42'], 'the same key, the same partition');
    const other = await pkOf('user-7');
    assert.equal(Buffer.from(other, 'base64').length, 16);
    assert.notEqual(other, PK_OF['user-42']);
    assert.equal(await pkOf('user-42', plain), undefined, 'no pk without partitionKeySecret');
    const policy = await sf(await app.get('/', { headers: { 'x-user': 'user-42' } }), 'ratelimit-policy');
    assert.deepEqual(policy, [['pk', { q: 10, w: 10 }]], 'RateLimit-Policy is the same for every partition');
  } finally {
    await app.close();
    await plain.close();
  }
});

test('partitionKeySecret: a string or bytes of at least 16 bytes, for draft-11, checked when built, never shown', () => {
  const limiter = Backend.memory().tokenBucket('pk-bad', 1, 10);
  for (const bad of [12345, {}, 'fifteen-bytes!!', new Uint8Array(15)]) {
    assert.throws(
      () => rateLimit({ limiter, partitionKeySecret: bad }),
      (error) => {
        assert.equal(error.code, 'ERR_INVALID_ARGUMENT');
        assert.equal(error.parameter, 'partitionKeySecret');
        assert.ok(typeof bad !== 'string' || !error.message.includes(bad), 'the secret is not in the message');
        return true;
      },
    );
  }
  assert.throws(() => rateLimit({ limiter, partitionKeySecret: PK_SECRET, standardHeaders: 'draft-7' }), {
    code: 'ERR_INVALID_ARGUMENT',
    parameter: 'partitionKeySecret',
  });
  rateLimit({ limiter, partitionKeySecret: Buffer.from(PK_SECRET) });
  rateLimit({ limiter, partitionKeySecret: undefined, standardHeaders: 'draft-7' });
});

test('draft-7, draft-6 and legacy fields read by ratelimit-header-parser; false sends none', async () => {
  const { parseRateLimit } = await import('ratelimit-header-parser');
  for (const form of ['draft-7', 'draft-6', 'legacy']) {
    const backend = Backend.memory({ clock: new ManualClock() });
    const app = await serve({ limiter: backend.window('api', 5, 'minute'), standardHeaders: form });
    try {
      await statuses(app, 2);
      const r = await app.get();
      const parsed = parseRateLimit(r.headers);
      assert.ok(parsed, `${form}: no fields parsed from ${JSON.stringify([...r.headers])}`);
      assert.equal(parsed.limit, 5, form);
      assert.equal(parsed.remaining, 2, form);
      const resetIn = (parsed.reset.getTime() - Date.now()) / 1000;
      assert.ok(resetIn > 55 && resetIn <= 61, `${form}: reset in ${resetIn}s`);
      if (form === 'draft-7') assert.equal(r.headers.get('ratelimit'), 'limit=5, remaining=2, reset=60');
      if (form !== 'legacy') assert.equal(r.headers.get('ratelimit-policy'), '5;w=60');
      assert.equal(r.headers.get('x-ratelimit-limit'), form === 'legacy' ? '5' : null);
    } finally {
      await app.close();
    }
  }
  const backend = Backend.memory();
  const app = await serve({ limiter: backend.window('api', 1, 'minute'), standardHeaders: false });
  try {
    const [ok, refused] = [await app.get(), await app.get()];
    assert.equal(ok.status, 200);
    assert.equal(refused.status, 429);
    for (const r of [ok, refused]) {
      assert.deepEqual([...r.headers.keys()].filter((n) => n.includes('ratelimit')), []);
    }
    assert.equal(refused.headers.get('retry-after'), '60', 'Retry-After is sent without the other fields');
  } finally {
    await app.close();
  }
});

test('Retry-After is the refusal in whole seconds, rounded up', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const app = await serve({ limiter: backend.tokenBucket('slow', 0.4, 1) }); // one per 2.5 s
  try {
    assert.deepEqual(await statuses(app, 1), [200]);
    const r = await app.get();
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '3');
    const body = await r.json();
    assert.equal(body.type, 'https://iana.org/assignments/http-problem-types#quota-exceeded');
    assert.deepEqual(body['violated-policies'], ['slow']);
  } finally {
    await app.close();
  }
});

test('several limiters: all must pass, and a refused request is not charged by the others', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const wide = backend.tokenBucket('wide', 0.001, 10);
  const narrow = backend.tokenBucket('narrow', 0.001, 3);
  const app = await serve({ limiter: [wide, narrow], keyGenerator: () => 'user-1' });
  try {
    assert.deepEqual(await statuses(app, 5), [200, 200, 200, 429, 429]);
    // The two refused requests took a unit of `wide`, given back when `narrow` refused.
    assert.equal((await wide.peek('user-1')).remaining, 7);
    const refused = await app.get();
    assert.deepEqual((await refused.json())['violated-policies'], ['narrow']);
  } finally {
    await app.close();
  }
});

test('cost: a number or a function of the request', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const app = await serve({ limiter: backend.tokenBucket('units', 0.001, 10), cost: (req) => Number(req.query.n ?? 1) });
  try {
    assert.deepEqual(await statuses(app, 1, '/?n=7'), [200]);
    assert.deepEqual(await statuses(app, 1, '/?n=4'), [429]);
    assert.deepEqual(await statuses(app, 3, '/?n=1'), [200, 200, 200]);
  } finally {
    await app.close();
  }
});

test('skip: an exempt request touches nothing and carries no fields', async () => {
  const backend = Backend.memory();
  const limiter = backend.window('api', 2, 'minute');
  const app = await serve({ limiter, skip: (req) => req.path === '/health' }, (a) => {
    a.get('/', (req, res) => res.send('ok'));
    a.get('/health', (req, res) => res.send('ok'));
  });
  try {
    const health = await app.get('/health');
    assert.equal(health.status, 200);
    assert.equal(health.headers.get('ratelimit'), null);
    assert.equal((await limiter.peek('127.0.0.1')).remaining, 2);
    assert.deepEqual(await statuses(app, 3), [200, 200, 429]);
    assert.deepEqual(await statuses(app, 3, '/health'), [200, 200, 200]);
  } finally {
    await app.close();
  }
});

function loginRoutes(app) {
  app.post('/login', (req, res) => res.status(req.query.password === 'right' ? 200 : 401).send('done'));
}

test("count: 'failures' gives a successful response's unit back; 'successes' a failed one's", async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const limiter = backend.tokenBucket('login', 0.001, 3);
  const app = await serve({ limiter, count: 'failures', keyGenerator: () => 'alice' }, loginRoutes);
  try {
    for (let i = 0; i < 5; i++) {
      assert.equal((await app.get('/login?password=right', { method: 'POST' })).status, 200);
      await waitUntil('the unit given back', 5000, async () => (await limiter.peek('alice')).remaining === 3);
    }
    assert.deepEqual(await statuses(app, 4, '/login?password=wrong', { method: 'POST' }), [401, 401, 401, 429]);
  } finally {
    await app.close();
  }

  const counted = backend.tokenBucket('lookups', 0.001, 2);
  const app2 = await serve({ limiter: counted, count: 'successes', keyGenerator: () => 'bob' }, (a) =>
    a.get('/item/:id', (req, res) => res.status(req.params.id === 'known' ? 200 : 404).send('')),
  );
  try {
    for (let i = 0; i < 4; i++) {
      assert.equal((await app2.get('/item/missing')).status, 404);
      await waitUntil('the unit given back', 5000, async () => (await counted.peek('bob')).remaining === 2);
    }
    assert.deepEqual(await statuses(app2, 3, '/item/known'), [200, 200, 429]);
  } finally {
    await app2.close();
  }
});

test("count on a kind that cannot refund: peeked before, charged after a response that counts", async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const limiter = backend.window('attempts', 3, 'minute');
  const app = await serve({ limiter, count: 'failures', keyGenerator: () => 'carol' }, loginRoutes);
  try {
    // Successes never charge: the window stays full.
    for (let i = 0; i < 5; i++) assert.equal((await app.get('/login?password=right', { method: 'POST' })).status, 200);
    assert.equal((await limiter.peek('carol')).remaining, 3);
    for (let i = 0; i < 3; i++) {
      assert.equal((await app.get('/login?password=wrong', { method: 'POST' })).status, 401);
      await waitUntil('the failure charged', 5000, async () => (await limiter.peek('carol')).remaining === 2 - i);
    }
    const refused = await app.get('/login?password=right', { method: 'POST' });
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '60');
  } finally {
    await app.close();
  }
});

test("count other than 'all' refuses what counts requests in flight (concurrent, FleetShedder)", () => {
  const backend = Backend.memory();
  for (const limiter of [backend.concurrent('c', 2), new FleetShedder(backend, 'fleet', 2)]) {
    assert.throws(() => rateLimit({ limiter, count: 'failures' }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'count' });
  }
});

test('cost: a whole number >= 1 within every limiter capacity, checked when built', () => {
  const backend = Backend.memory();
  const limiter = [backend.tokenBucket('tb', 1, 5), backend.windows('ws', [{ limit: 10, intervalMs: 1000 }, { limit: 3, intervalMs: 60_000 }])];
  assert.ok(rateLimit({ limiter, cost: 3 }));
  for (const cost of [0, 1.5, 4, -1]) {
    assert.throws(() => rateLimit({ limiter, cost }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'cost' }, String(cost));
  }
  // The core's bound holds on a limiter with no capacity (the bad-input table has the cost above it).
  assert.ok(rateLimit({ limiter: backend.unlimited('u'), cost: 2 ** 53 }));
});

test('shadow: headers as enforced, nothing refused, would-be refusals counted', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const app = await serve({ limiter: backend.window('api', 2, 'minute'), shadow: true });
  try {
    assert.deepEqual(await statuses(app, 5), [200, 200, 200, 200, 200]);
    const r = await app.get();
    assert.equal(r.status, 200);
    assert.deepEqual(await sf(r, 'ratelimit'), [['api', { r: 0, t: 60 }]]);
    assert.equal(r.headers.get('retry-after'), null);
    assert.equal(app.middleware.shadowRefused, 4);
  } finally {
    await app.close();
  }
});

test('handler: answers refusals instead of the default problem', async () => {
  const backend = Backend.memory({ clock: new ManualClock() });
  const seen = [];
  const app = await serve({
    limiter: backend.window('api', 1, 'minute'),
    handler: (req, res, next, info) => {
      seen.push(info);
      res.status(info.status).json({ message: 'slow down', retryAfter: info.retryAfterSeconds });
    },
  });
  try {
    await statuses(app, 1);
    const r = await app.get();
    assert.equal(r.status, 429);
    assert.deepEqual(await r.json(), { message: 'slow down', retryAfter: 60 });
    assert.equal(r.headers.get('retry-after'), '60');
    assert.equal(seen[0].reason, 'limited');
    assert.deepEqual(seen[0].violatedPolicies, ['api']);
  } finally {
    await app.close();
  }
});

test('keys: the peer address by default; forwarding headers only behind trustedProxies', async () => {
  const backend = Backend.memory();
  const untrusted = await serve({ limiter: backend.window('a', 1, 'minute') });
  try {
    const spoofed = (ip) => ({ headers: { 'x-forwarded-for': ip } });
    assert.equal((await untrusted.get('/', spoofed('1.1.1.1'))).status, 200);
    assert.equal((await untrusted.get('/', spoofed('2.2.2.2'))).status, 429, 'X-Forwarded-For is not trusted by default');
  } finally {
    await untrusted.close();
  }
  const trusted = await serve({ limiter: backend.window('b', 1, 'minute'), trustedProxies: ['127.0.0.1', '::1'] });
  try {
    const via = (headers) => ({ headers });
    assert.equal((await trusted.get('/', via({ 'x-forwarded-for': '1.1.1.1' }))).status, 200);
    assert.equal((await trusted.get('/', via({ 'x-forwarded-for': '2.2.2.2' }))).status, 200);
    // A client cannot pick its key by prepending: the rightmost untrusted hop is the client.
    assert.equal((await trusted.get('/', via({ 'x-forwarded-for': '9.9.9.9, 2.2.2.2' }))).status, 429);
    // Nor by a Forwarded header: only proxyHeader (default X-Forwarded-For) is read.
    assert.equal((await trusted.get('/', via({ forwarded: 'for=3.3.3.3', 'x-forwarded-for': '2.2.2.2' }))).status, 429);
    // IPv6 addresses in one /56 share a key; the next /56 is another client.
    assert.equal((await trusted.get('/', via({ 'x-forwarded-for': '2001:db8:0:ab12::1' }))).status, 200);
    assert.equal((await trusted.get('/', via({ 'x-forwarded-for': '2001:db8:0:abff:ffff::2' }))).status, 429);
    assert.equal((await trusted.get('/', via({ 'x-forwarded-for': '2001:db8:0:ac00::1' }))).status, 200);
  } finally {
    await trusted.close();
  }
  const forwarded = await serve({ limiter: backend.window('c', 1, 'minute'), trustedProxies: ['127.0.0.1', '::1'], proxyHeader: 'forwarded' });
  try {
    const via = (headers) => ({ headers });
    assert.equal((await forwarded.get('/', via({ forwarded: 'for="[2001:db8:0:ab12::1]:4711";proto=https' }))).status, 200);
    assert.equal((await forwarded.get('/', via({ forwarded: 'for=9.9.9.9, for=2001:db8:0:abff::2' }))).status, 429, 'one /56');
    assert.equal((await forwarded.get('/', via({ 'x-forwarded-for': '4.4.4.4', forwarded: 'for=5.5.5.5' }))).status, 200);
    assert.equal((await forwarded.get('/', via({ 'x-forwarded-for': '6.6.6.6', forwarded: 'for=5.5.5.5' }))).status, 429, 'X-Forwarded-For is not read');
  } finally {
    await forwarded.close();
  }
});

test('proxyHeader: X-Forwarded-For or Forwarded, in any case; anything else is refused when built', () => {
  const limiter = Backend.memory().window('p', 1, 'minute');
  for (const proxyHeader of ['X-Forwarded-For', 'Forwarded', 'x-forwarded-for', 'FORWARDED', undefined]) {
    rateLimit({ limiter, trustedProxies: ['10.0.0.0/8'], proxyHeader });
  }
  for (const proxyHeader of ['X-Real-IP', 'CF-Connecting-IP', '', null, 1, ['X-Forwarded-For']]) {
    assert.throws(() => rateLimit({ limiter, trustedProxies: ['10.0.0.0/8'], proxyHeader }), {
      code: 'ERR_INVALID_ARGUMENT',
      parameter: 'proxyHeader',
    });
  }
});

test('a request over IPv6 is keyed by its /56', async (t) => {
  const backend = Backend.memory();
  const limiter = backend.window('v6', 5, 'minute');
  let app;
  try {
    app = await serve({ limiter }, undefined, '::1');
  } catch (error) {
    t.skip(`no IPv6 loopback here: ${error.message}`);
    return;
  }
  try {
    assert.equal((await app.get()).status, 200);
    assert.equal((await limiter.peek('::/56')).remaining, 4);
  } finally {
    await app.close();
  }
});

test('a concurrent limiter holds its slot until the response is sent', async () => {
  const backend = Backend.memory();
  const limiter = backend.concurrent('inflight', 1);
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  const app = await serve({ limiter }, (a) => {
    a.get('/slow', async (req, res) => {
      await gate;
      res.send('done');
    });
    a.get('/', (req, res) => res.send('ok'));
  });
  try {
    const slow = app.get('/slow');
    await waitUntil('the slow request holds the slot', 5000, async () => (await limiter.peek('127.0.0.1')).remaining === 0);
    const refused = await app.get();
    assert.equal(refused.status, 429);
    assert.deepEqual(await sf(refused, 'ratelimit-policy'), [['inflight', { q: 1 }]]);
    release();
    assert.equal((await slow).status, 200);
    await waitUntil('the slot released', 5000, async () => (await limiter.peek('127.0.0.1')).remaining === 1);
    assert.equal((await app.get()).status, 200);
  } finally {
    release();
    await app.close();
  }
});

test("a shedder's refusal answers 503 temporary-reduced-capacity", async () => {
  const backend = Backend.memory();
  const shedder = new FleetShedder(backend, 'fleet', 1);
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  let entered;
  const inside = new Promise((resolve) => (entered = resolve));
  const app = await serve({ limiter: shedder }, (a) => {
    a.get('/slow', async (req, res) => {
      entered();
      await gate;
      res.send('done');
    });
    a.get('/', (req, res) => res.send('ok'));
  });
  try {
    const slow = app.get('/slow');
    await inside;
    const shed = await app.get();
    assert.equal(shed.status, 503);
    assert.equal(shed.headers.get('content-type'), 'application/problem+json');
    assert.equal((await shed.json()).type, 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity');
    assert.match(shed.headers.get('retry-after'), /^[1-9]\d*$/);
    release();
    assert.equal((await slow).status, 200);
    await waitUntil('the slot given back', 5000, async () => (await app.get()).status === 200);
  } finally {
    release();
    await app.close();
  }
});

test('backend failure follows the failure policy: fail_open admits, fail_closed answers 503', async () => {
  const port = await freePort(); // nobody listens there
  const open = Backend.redis(`redis://127.0.0.1:${port}`, { failurePolicy: 'fail_open', deadlineMs: 100, connectTimeoutMs: 100 });
  const closed = Backend.redis(`redis://127.0.0.1:${port}`, { deadlineMs: 100, connectTimeoutMs: 100 });
  const a = await serve({ limiter: open.window('api', 1, 'minute') });
  const closedLimiter = closed.window('api', 1, 'minute');
  const b = await serve({ limiter: closedLimiter });
  // Issue 46: a 503 said nothing in Node. The middleware says why once (not per request) and the
  // limiter's metrics count every failure.
  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => warnings.push(args.join(' '));
  try {
    assert.deepEqual(await statuses(a, 3), [200, 200, 200]);
    const r = await b.get();
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(r.headers.get('content-type'), 'application/problem+json');
    assert.deepEqual(await statuses(b, 2), [503, 503]);
    assert.equal(warnings.length, 1, `one warning for the outage: ${JSON.stringify(warnings)}`);
    assert.match(warnings[0], /ratekeeper: 'api' failed closed, answering 503/);
    assert.equal(closedLimiter.metrics().errors, 3, 'every failure counted');
  } finally {
    console.warn = warn;
    await a.close();
    await b.close();
  }
});

test('a key the limiter refuses as invalid goes to the framework, nothing written', async () => {
  const backend = Backend.memory();
  const limiter = backend.window('api', 5, 'minute');
  const errors = [];
  const app = await serve({ limiter, keyGenerator: () => 'k'.repeat(2000) }, (a) => {
    a.get('/', (req, res) => res.send('ok'));
    a.use((error, req, res, next) => {
      errors.push(error);
      res.status(500).send('error');
    });
  });
  try {
    assert.equal((await app.get()).status, 500);
    assert.equal(errors[0].code, 'ERR_INVALID_ARGUMENT');
  } finally {
    await app.close();
  }
});
