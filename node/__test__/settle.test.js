// Settling a call with its actual cost through Node: once per decision, on memory (Promise and
// sync forms) and on a real redis-server (the driven connection); a stored decision (its JSON)
// settles like the original; bad arguments are typed errors naming `decision` or `actual`.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend, ManualClock, codes } = require('../index.js');
const { RedisServer } = require('./support/redis.js');

const START_US = 1_700_000_000_000_000;

async function settlesOnce(limiter) {
  const d = await limiter.check('u', 8);
  assert.equal(d.remaining, 2);
  const stored = JSON.parse(JSON.stringify(d));
  assert.equal((await limiter.settle(stored, 3)).remaining, 7);
  assert.equal((await limiter.settle(d, 3)).remaining, 7, 'a repeat applies nothing');
  assert.equal((await limiter.peek('u')).remaining, 7);
}

test('settle refunds once, Promise and sync forms, on memory', async () => {
  const limiter = Backend.memory({ clock: new ManualClock(START_US) }).tokenBucket('tb', 10, 10);
  await settlesOnce(limiter);
  const d = limiter.checkSync('v', 5);
  assert.equal(limiter.settleSync(d, 9).remaining, 1, 'charged 4 more');
  assert.equal(limiter.settleSync(d, 9).remaining, 1, 'once');
});

test('settle refunds once on redis (driven calls)', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.stop());
  const backend = Backend.redis(server.url, { prefix: 'node-settle' });
  await settlesOnce(backend.tokenBucket('tb', 0.001, 10));
  const windows = backend.windows('w', [{ limit: 5, intervalMs: 10_000 }, { limit: 50, intervalMs: 600_000 }]);
  const d = await windows.check('k', 4);
  assert.equal(d.settle.key, 'k');
  assert.equal((await windows.settle(d, 1)).remaining, 4);
});

test('bad settles are typed errors naming the parameter', async () => {
  const backend = Backend.memory({ clock: new ManualClock(START_US) });
  const limiter = backend.tokenBucket('tb', 10, 10);
  const other = backend.tokenBucket('other', 10, 10);
  const d = await limiter.check('u', 1);
  for (const [call, parameter] of [
    [() => limiter.settle(null, 1), 'decision'],
    [() => limiter.settle('x', 1), 'decision'],
    [() => limiter.settle({ allowed: true, settle: { id: 'x' } }, 1), 'decision'],
    [() => other.settle(d, 1), 'decision'],
    [() => limiter.settle(d, -1), 'actual'],
    [() => limiter.settle(d, 1.5), 'actual'],
    [() => limiter.settle(d), 'actual'],
  ]) {
    await assert.rejects(call(), (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === parameter);
  }
  assert.throws(() => limiter.settleSync(d, -1), (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === 'actual');
  assert.equal((await limiter.peek('u')).remaining, 9, 'nothing was written');
});

test('a leased decision stored as JSON is settled by another process, and settles are counted', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.stop());
  const prefix = `node-settle-leased-${process.pid}`;
  const [first, second] = [0, 1].map(() => Backend.redis(server.url, { prefix }));
  const mine = first.leased('llm', 0.001, 100, { chunk: 1 });
  const theirs = second.leased('llm', 0.001, 100, { chunk: 1 });
  const d = await mine.check('k', 8);
  const stored = JSON.parse(JSON.stringify(d));
  assert.equal((await theirs.settle(stored, 3)).remaining, 97, 'refunded 5 from another backend');
  assert.equal((await mine.settle(d, 3)).remaining, 97, 'a repeat applies nothing');
  const charged = await mine.check('k', 2);
  assert.equal((await mine.settle(charged, 6)).remaining, 91, 'charged 4');
  const counts = (m) => [m.settles, m.settleCharged, m.settleRefunded];
  assert.deepEqual(counts(theirs.metrics()), [1, 0, 5]);
  assert.deepEqual(counts(mine.metrics()), [1, 4, 0], 'the repeat is not counted');
  await Promise.all([first.flush(), second.flush()]);
  const fleet = (await first.metrics({ fleet: true })).find((l) => l.name === 'llm');
  assert.deepEqual(counts(fleet.metrics), [2, 4, 5]);
  const text = await first.prometheus({ fleet: true });
  assert.match(text, /^ratekeeper_settles_total\{limiter="llm",kind="leased"\} 2$/m);
  assert.match(text, /^ratekeeper_settled_units_total\{limiter="llm",kind="leased",direction="refunded"\} 5$/m);
});

// A ticket that comes back from outside the process (JSON) is settled only as it was issued:
// one with its key, cost, id or instant altered, or made up, or with its seal removed, is refused
// with ERR_INVALID_ARGUMENT naming `decision`, and changes nothing; on Redis another backend of
// the same prefix settles the genuine one (the secret is shared through Redis), a backend of
// another prefix does not.
async function forgedTicketsAreRefused(mine, theirs, stranger) {
  await mine.check('victim', 9);
  const d = await mine.check('attacker', 5);
  const stored = JSON.parse(JSON.stringify(d));
  const left = async () => [(await mine.peek('victim')).remaining, (await mine.peek('attacker')).remaining];
  const before = await left();
  assert.deepEqual(before, [1, 5]);
  const forge = (change) => {
    const copy = JSON.parse(JSON.stringify(stored));
    change(copy.settle);
    return copy;
  };
  const forgeries = [
    forge((t) => { t.key = 'victim'; t.cost = 9; }),
    forge((t) => { t.key = 'victim'; }),
    forge((t) => { t.cost = 10; }),
    forge((t) => { t.id += 1; }),
    forge((t) => { t.chargedAtUs -= 1; }),
    forge((t) => { delete t.seal; }),
    forge((t) => { t.seal = 'ab'.repeat(32); }),
    { allowed: true, settle: { id: 12345, limiter: stored.settle.limiter, cost: 9, chargedAtUs: stored.settle.chargedAtUs, key: 'victim' } },
  ];
  for (const forged of forgeries) {
    await assert.rejects(
      mine.settle(forged, 0),
      (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === 'decision',
      JSON.stringify(forged.settle),
    );
  }
  assert.deepEqual(await left(), before, 'a forged ticket changed nothing');
  if (stranger) {
    await assert.rejects(stranger.settle(stored, 0), (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === 'decision');
  }
  assert.equal((await theirs.settle(stored, 0)).remaining, 10, 'the genuine ticket settles');
}

test('forged or altered settle tickets are refused and change nothing, on memory', async () => {
  const backend = Backend.memory();
  const limiter = backend.tokenBucket('tb', 0.001, 10);
  await forgedTicketsAreRefused(limiter, limiter, null);
});

test('forged or altered settle tickets are refused and change nothing, on redis', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.stop());
  const prefix = `node-settle-forged-${process.pid}`;
  const [first, second] = [0, 1].map(() => Backend.redis(server.url, { prefix }));
  const other = Backend.redis(server.url, { prefix: `${prefix}-other` });
  await forgedTicketsAreRefused(
    first.tokenBucket('tb', 0.001, 10),
    second.tokenBucket('tb', 0.001, 10),
    other.tokenBucket('tb', 0.001, 10),
  );
});

// A settle is not an admission: with Redis gone it rejects with the backend's error under every
// failure policy (it did not apply, so the caller can retry it).
test('a settle with redis killed rejects under fail_open and fallback too', async (t) => {
  for (const failurePolicy of ['fail_closed', 'fail_open', { fallback: 2 }]) {
    const server = await RedisServer.start();
    t.after(() => server.stop());
    const backend = Backend.redis(server.url, { prefix: `node-settle-down-${process.pid}`, deadlineMs: 300, failurePolicy });
    const limiter = backend.tokenBucket('tb', 0.001, 10);
    const d = await limiter.check('k', 8);
    await server.stop();
    await assert.rejects(
      limiter.settle(d, 3),
      (e) => e.code === codes.BACKEND_UNAVAILABLE || e.code === codes.TIMEOUT,
      JSON.stringify(failurePolicy),
    );
  }
});
