'use strict';
// Errors: bad arguments are ERR_INVALID_ARGUMENT naming the parameter (its JavaScript name),
// thrown by constructors and synchronous calls, rejected by Promise-returning calls; every
// other kind keeps its stable code; a dead Redis is ERR_BACKEND_UNAVAILABLE / ERR_TIMEOUT
// within the deadline, or allowed / answered by the fallback under the other failure policies.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend, Limiter, ManualClock, FleetShedder, UtilizationShedder } = require('..');
const { freePort, watchdog } = require('./support/redis.js');
const net = require('node:net');

const backend = Backend.memory();
const bucket = backend.bucket('b', 5, '1s');
const mutex = backend.concurrent('m', 1);

/** [description, thunk, parameter]: every thunk must throw or reject with ERR_INVALID_ARGUMENT. */
const cases = [
  ['name with a space', () => backend.bucket('a b', 1, '1s'), 'name'],
  ['empty name', () => backend.bucket('', 1, '1s'), 'name'],
  ['name not a string', () => backend.bucket(42, 1, '1s'), 'name'],
  ['missing name', () => backend.tokenBucket(), 'name'],
  ['limit 0', () => backend.bucket('b', 0, '1s'), 'limit'],
  ['limit 1.5', () => backend.window('b', 1.5, '1s'), 'limit'],
  ['limit NaN', () => backend.bucket('b', NaN, '1s'), 'limit'],
  ['limit above 2^53', () => backend.bucket('b', 2 ** 53 + 2, '1s'), 'limit'],
  ['limit a string before an interval', () => backend.bucket('b', 'ten', '1s'), 'limit'],
  ['limit a string read as a rate', () => backend.bucket('b', 'ten'), 'rate'],
  ['interval name', () => backend.bucket('b', 1, 'fortnight'), 'interval'],
  ['interval 0', () => backend.window('b', 1, '0s'), 'interval'],
  ['interval a bare number', () => backend.window('b', 1, 60), 'interval'],
  ['rate with an unknown unit', () => backend.window('b', '5/minte'), 'rate'],
  ['rate without a count', () => backend.bucket('b', 'five/minute'), 'rate'],
  ['rate then options then more', () => backend.bucket('b', '5/minute', {}, {}), 'options'],
  ['windows rate with a bare number', () => backend.windows('w', '25/5; 300/minute'), 'rate'],
  ['interval Infinity', () => backend.bucket('b', 1, Infinity), 'interval'],
  ['lockTimeoutMs negative', () => backend.concurrent('c', 1, { lockTimeoutMs: -1 }), 'lockTimeoutMs'],
  ['waitTimeoutMs negative', () => backend.concurrent('c', 1, { waitTimeoutMs: -5 }), 'waitTimeoutMs'],
  ['waitTimeoutMs a string', () => backend.bucket('b', 1, '1s', { waitTimeoutMs: 'soon' }), 'waitTimeoutMs'],
  ['options not an object', () => backend.bucket('b', 1, '1s', 7), 'options'],
  ['no windows', () => backend.windows('w', []), 'windows'],
  ['window without interval', () => backend.windows('w', [{ limit: 1 }]), 'windows.intervalMs'],
  ['no sliding limits', () => backend.slidingWindow('s', []), 'limits'],
  ['sliding tuple too long', () => backend.slidingWindow('s', [[1000, 1, 1, 1]]), 'limits'],
  ['precision too fine', () => backend.slidingWindow('s', [{ durationMs: 10000, limit: 1, precisionMs: 0.001 }]), 'precisionMs'],
  ['durationMs 0', () => backend.slidingWindow('s', [{ durationMs: 0, limit: 1 }]), 'durationMs'],
  ['tuple duration a bare number', () => backend.slidingWindow('s', [[1000, 1]]), 'duration'],
  ['rate 0', () => backend.tokenBucket('t', 0, 1), 'rate'],
  ['rate above 1e6', () => backend.tokenBucket('t', 2e6, 1), 'rate'],
  ['capacity 0', () => backend.tokenBucket('t', 1, 0), 'capacity'],
  ['size 0', () => backend.leaky('l', 0, '1s'), 'size'],
  ['drain NaN', () => backend.leaky('l', 1, NaN), 'drain'],
  ['refill negative', () => backend.points('p', 10, '-1s'), 'refill'],
  ['unlimited bad name', () => backend.unlimited('no!'), 'name'],
  ['check key not a string', () => bucket.check(5), 'key'],
  ['check key above 1 KiB', () => bucket.check('k'.repeat(1025)), 'key'],
  ['check cost 1.5', () => bucket.check('k', 1.5), 'cost'],
  ['check cost negative', () => bucket.check('k', -1), 'cost'],
  ['check cost above capacity', () => bucket.check('k', 6), 'cost'],
  ['checkSync cost a string', () => bucket.checkSync('k', '1'), 'cost'],
  ['peek key an object', () => bucket.peek({}), 'key'],
  ['concurrent cost 2', () => mutex.check('k', 2), 'cost'],
  ['acquire waitTimeoutMs NaN', () => bucket.acquire('k', { waitTimeoutMs: NaN }), 'waitTimeoutMs'],
  ['acquire cost a boolean', () => bucket.acquire('k', { cost: true }), 'cost'],
  ['withWaitTimeout negative', () => bucket.withWaitTimeout(-1), 'waitTimeout'],
  ['release without a lease', () => mutex.release(), 'lease'],
  ['release a malformed lease', () => mutex.release({ id: 'xyz' }), 'lease'],
  ['release on a bucket', () => bucket.release({ id: '1', fencingToken: 1, grantedAtUs: 1 }), 'lease'],
  ['pointsUsed on a bucket', () => bucket.pointsUsed('k', 1, 1), 'actual'],
  ['pointsUsed actual missing', () => backend.points('p', 10, '1s').pointsUsed('k', 1), 'actual'],
  ['pointsUsed estimate above capacity', () => backend.points('p', 10, '1s').pointsUsed('k', 11, 1), 'estimate'],
  // Strings that are not Unicode scalar values (lone surrogates) are refused, never turned into
  // U+FFFD (which would make two different keys share state).
  ['check key with a lone high surrogate', () => bucket.check('user-\uD800'), 'key'],
  ['checkSync key with a lone low surrogate', () => bucket.checkSync('\uDC00'), 'key'],
  ['peek key with a lone surrogate', () => bucket.peek('a\uD83Db'), 'key'],
  ['peekSync key with a lone surrogate', () => bucket.peekSync('\uD800'), 'key'],
  ['acquire key with a lone surrogate', () => bucket.acquire('\uD800'), 'key'],
  ['reset key with a lone surrogate', () => bucket.reset('\uD800'), 'key'],
  ['pointsUsed key with a lone surrogate', () => backend.points('p', 10, '1s').pointsUsed('\uD800', 1, 1), 'key'],
  ['withinLimit key with a lone surrogate', () => bucket.withinLimit(() => 1, { key: '\uD800' }), 'key'],
  ['release a lease whose key has a lone surrogate', () => mutex.release({ id: '1', fencingToken: 1, grantedAtUs: 1, key: '\uD800' }), 'key'],
  ['name with a lone surrogate', () => backend.bucket('b\uD800', 1, '1s'), 'name'],
  ['memory maxKeys 0', () => Backend.memory({ maxKeys: 0 }), 'maxKeys'],
  ['memory clock not a ManualClock', () => Backend.memory({ clock: {} }), 'clock'],
  ['redis url scheme', () => Backend.redis('http://127.0.0.1:1'), 'url'],
  ['redis url missing', () => Backend.redis(), 'url'],
  ['redis prefix with a colon', () => Backend.redis('redis://127.0.0.1:1', { prefix: 'a:b' }), 'prefix'],
  ['failure policy unknown', () => Backend.redis('redis://127.0.0.1:1', { failurePolicy: 'maybe' }), 'failurePolicy'],
  ['fallback divisor 0', () => Backend.redis('redis://127.0.0.1:1', { failurePolicy: { fallback: 0 } }), 'failurePolicy.fallback'],
  ['allowFallback not a boolean', () => backend.concurrent('m', 1, { allowFallback: 1 }), 'allowFallback'],
  ['deadlineMs 0', () => Backend.redis('redis://127.0.0.1:1', { deadlineMs: 0 }), 'deadlineMs'],
  ['connectTimeoutMs negative', () => Backend.redis('redis://127.0.0.1:1', { connectTimeoutMs: -1 }), 'connectTimeoutMs'],
  ['tls cert without key', () => Backend.redis('rediss://127.0.0.1:1', { tls: { cert: 'x' } }), 'tls.key'],
  ['cluster seeds not an array', () => Backend.cluster('redis://127.0.0.1:1'), 'seeds'],
  ['manual clock start a string', () => new ManualClock('now'), 'startUs'],
  ['manual clock advance negative', () => new ManualClock(0).advance(-1), 'ms'],
  ['fleet shedder without a backend', () => new FleetShedder({}, 'f', 1), 'backend'],
  ['fleet shedder limit 0', () => new FleetShedder(backend, 'f', 0), 'limit'],
  ['fleet enter critical a string', () => new FleetShedder(backend, 'f', 1).enter('yes'), 'critical'],
  ['utilization endOfGood above 1', () => new UtilizationShedder({ endOfGood: 2 }), 'endOfGood'],
  ['utilization levels 0', () => new UtilizationShedder({ levels: 0 }), 'levels'],
  ['utilization priority too high', () => new UtilizationShedder().check(9), 'priority'],
];

for (const [description, thunk, parameter] of cases) {
  test(`bad argument: ${description} -> ${parameter}`, async () => {
    let error;
    try {
      const result = thunk();
      assert.ok(result instanceof Promise, 'a synchronous call with a bad argument must throw');
      await result;
    } catch (e) {
      error = e;
    }
    assert.ok(error instanceof Error, `expected an Error, got ${error}`);
    assert.equal(error.code, 'ERR_INVALID_ARGUMENT', error.message);
    assert.equal(error.parameter, parameter, error.message);
    assert.ok(error.message.includes(`\`${parameter}\``), `the message names the parameter: ${error.message}`);
  });
}

// Options objects are typed: a property that is not an option (a typo) is refused naming it,
// instead of being ignored and its option's default silently used. One case per function that
// takes options, and per nested options object.
const redisUrl = 'redis://127.0.0.1:1';
const unknownOptions = [
  ['Backend.memory', () => Backend.memory({ maxKey: 10 }), 'maxKey'],
  ['Backend.redis', () => Backend.redis(redisUrl, { deadline: 100 }), 'deadline'],
  ['Backend.redis tls', () => Backend.redis(redisUrl, { tls: { caa: 'x' } }), 'tls.caa'],
  ['Backend.redis failurePolicy', () => Backend.redis(redisUrl, { failurePolicy: { fallback: 2, divisor: 2 } }), 'failurePolicy.divisor'],
  ['Backend.cluster', () => Backend.cluster([redisUrl], { prefx: 'a' }), 'prefx'],
  ['concurrent', () => backend.concurrent('c', 1, { lockTimeout: 5 }), 'lockTimeout'],
  ['bucket', () => backend.bucket('b', 1, '1s', { waitTimeoutt: 5 }), 'waitTimeoutt'],
  ['window', () => backend.window('w', 1, '1s', { waitTimeout: 5 }), 'waitTimeout'],
  ['windows', () => backend.windows('w', [{ limit: 1, intervalMs: 1000 }], { wait: 5 }), 'wait'],
  ['windows element', () => backend.windows('w', [{ limit: 1, intervalMs: 1000, interval: 5 }]), 'windows.interval'],
  ['slidingWindow', () => backend.slidingWindow('s', [['1s', 1]], { waitTimeoutMS: 5 }), 'waitTimeoutMS'],
  ['slidingWindow element', () => backend.slidingWindow('s', [{ durationMs: 1000, limit: 1, precison: 10 }]), 'limits.precison'],
  ['tokenBucket', () => backend.tokenBucket('t', 1, 1, { burst: 5 }), 'burst'],
  ['leaky', () => backend.leaky('l', 1, '1s', { drainMs: 5 }), 'drainMs'],
  ['points', () => backend.points('p', 1, '1s', { refillMs: 5 }), 'refillMs'],
  ['calendar', () => backend.calendar('k', 1, 'day', { timezone: 'UTC' }), 'timezone'],
  ['acquire', () => bucket.acquire('k', { waitTimeout: 5 }), 'waitTimeout'],
  ['withinLimit', () => bucket.withinLimit(() => 1, { keys: 'k' }), 'keys'],
  ['FleetShedder', () => new FleetShedder(backend, 'f', 1, { lockTimeoutMS: 5 }), 'lockTimeoutMS'],
  ['FleetShedder run', () => new FleetShedder(backend, 'f', 1).run(() => 1, { critcal: true }), 'critcal'],
  ['UtilizationShedder', () => new UtilizationShedder({ endOfGod: 0.5 }), 'endOfGod'],
];

for (const [description, thunk, option] of unknownOptions) {
  test(`unknown option: ${description} refuses \`${option}\``, async () => {
    let error;
    try {
      const result = thunk();
      assert.ok(result instanceof Promise, 'a synchronous call with an unknown option must throw');
      await result;
    } catch (e) {
      error = e;
    }
    assert.ok(error instanceof Error, `expected an Error, got ${error}`);
    assert.equal(error.code, 'ERR_INVALID_ARGUMENT', error.message);
    assert.equal(error.parameter, option, error.message);
    assert.ok(error.message.includes(`\`${option}\`: is not an option`), error.message);
  });
}

// A value of the wrong type in an options object (converted by napi's derived conversion, see
// node/src/options.rs) is refused naming the option by its path, with the same words as a
// positional argument.
const cyclic = {};
cyclic.self = cyclic;
const wrongOptionTypes = [
  [() => Backend.memory({ maxKeys: 'x' }), 'maxKeys', 'must be a number, got a string'],
  [() => Backend.memory({ maxKeys: 10n }), 'maxKeys', 'must be a number, got a bigint'],
  [() => Backend.memory({ clock: {} }), 'clock', 'must be a ManualClock, got an object'],
  [() => Backend.redis(redisUrl, { prefix: cyclic }), 'prefix', 'must be a string, got an object'],
  [() => Backend.redis(redisUrl, { prefix: 'a\uD800' }), 'prefix', 'must be a well-formed Unicode string; found a lone surrogate U+D800'],
  [() => Backend.redis(redisUrl, { tls: 'x' }), 'tls', 'must be an object, got a string'],
  [() => Backend.redis(redisUrl, { tls: { ca: 5 } }), 'tls.ca', 'must be a string or a Buffer, got a number'],
  [() => Backend.redis(redisUrl, { failurePolicy: 5 }), 'failurePolicy', 'must be an object, got a number'],
  [() => Backend.redis(redisUrl, { failurePolicy: { fallback: 'x' } }), 'failurePolicy.fallback', 'must be a number, got a string'],
  [() => Backend.redis(redisUrl, { failurePolicy: { fallback: null } }), 'failurePolicy.fallback', 'is required'],
  [() => backend.concurrent('c', 1, { allowFallback: 1 }), 'allowFallback', 'must be a boolean, got a number'],
  [() => backend.windows('w', [{ limit: 1 }]), 'windows.intervalMs', 'is required'],
  [() => backend.slidingWindow('s', [{ durationMs: 1000, limit: 1, precisionMs: 'x' }]), 'limits.precisionMs', 'must be a number, got a string'],
  [() => bucket.acquire('k', { cost: 'x' }), 'cost', 'must be a number, got a string'],
];

for (const [thunk, parameter, message] of wrongOptionTypes) {
  test(`wrong option type: \`${parameter}\` ${message}`, async () => {
    let error;
    try {
      await thunk();
    } catch (e) {
      error = e;
    }
    assert.ok(error instanceof Error, `expected an Error, got ${error}`);
    assert.equal(error.code, 'ERR_INVALID_ARGUMENT', error.message);
    assert.equal(error.parameter, parameter, error.message);
    assert.equal(error.message, `invalid argument \`${parameter}\`: ${message}`);
  });
}

test('an option whose value is undefined or null counts as absent; every known option is accepted', async () => {
  const l = backend.bucket('known-options', 1, '1s', { waitTimeoutMs: undefined });
  assert.equal((await l.acquire('k', { cost: null, waitTimeoutMs: 0, signal: undefined })).allowed, true);
  assert.equal(await l.withinLimit(() => 7, { key: 'j', cost: 1, policy: 'raise', waitTimeoutMs: 0, signal: undefined }), 7);
  backend.concurrent('known-options', 1, { lockTimeoutMs: 1000, waitTimeoutMs: 0, allowFallback: false });
  backend.calendar('known-options', 1, 'month', { tz: 'Europe/Berlin', anchor: 15, waitTimeoutMs: 0 });
  Backend.memory({ maxKeys: 10, shards: 1, clock: new ManualClock(0) });
  new UtilizationShedder({ endOfGood: 0.7, startOfBad: 0.8, beforeSheddingMs: 1, toShedAllMs: 1, levels: 3, clock: new ManualClock(0) });
});

test('a key with a lone surrogate never shares state with its U+FFFD twin', async () => {
  const limiter = Backend.memory().tokenBucket('t', 1, 1);
  assert.equal(limiter.checkSync('x\uFFFD').allowed, true);
  assert.throws(() => limiter.checkSync('x\uD800'), { code: 'ERR_INVALID_ARGUMENT', parameter: 'key' });
  await assert.rejects(limiter.check('x\uD800'), { code: 'ERR_INVALID_ARGUMENT', parameter: 'key' });
  assert.equal(limiter.peekSync('x\uFFFD').remaining, 0);
  // A well-formed pair is one character, and a key like any other.
  assert.equal(limiter.checkSync('x\uD83D\uDE00').allowed, true);
});

test('a permit reports pointsUsed once; an actual above capacity is charged as debt', async () => {
  const points = Backend.memory().points('p', 10, '10s');
  await points.withinLimit(
    async (permit) => {
      assert.equal((await permit.pointsUsed(1)).remaining, 9);
      await assert.rejects(permit.pointsUsed(1), { code: 'ERR_INVALID_ARGUMENT', parameter: 'actual' });
    },
    { key: 'k', cost: 4 },
  );
  assert.equal((await points.peek('k')).remaining, 9, 'refunded once');
  const charged = await points.pointsUsed('k', 1, 25); // above capacity: debt, not refused
  assert.equal(charged.allowed, false);
});

test('Promise-returning calls reject instead of throwing', () => {
  const p = bucket.check(5);
  assert.ok(p instanceof Promise);
  return assert.rejects(p, { code: 'ERR_INVALID_ARGUMENT' });
});

test('over limit carries retryAfterMs; lease lost and shed keep their codes', async () => {
  const clock = new ManualClock(1_700_000_000_000_000);
  const limiter = Backend.memory({ clock }).bucket('o', 1, '1s').withWaitTimeout(0);
  await limiter.check();
  const over = await limiter.acquire().catch((e) => e);
  assert.equal(over.code, 'ERR_OVER_LIMIT');
  assert.equal(over.retryAfterMs, 1000);
  assert.match(over.message, /over limit/);
  const c = Backend.memory().concurrent('lost', 1);
  const d = await c.check();
  await c.reset();
  const lost = await c.release(d.lease).catch((e) => e);
  assert.equal(lost.code, 'ERR_LEASE_LOST');
  assert.match(lost.message, /lease lost/);
  const shed = new UtilizationShedder({ clock, beforeSheddingMs: 1, toShedAllMs: 1 });
  for (let i = 0; i < 5; i++) {
    shed.observe(1);
    clock.advance(10);
  }
  assert.equal(shed.dropChance(1), 1);
  assert.throws(() => shed.check(1), (e) => e.code === 'ERR_SHED' && /shed/.test(e.message));
});

test('a dead Redis: fail_closed errors within the deadline, fail_open allows, fallback answers', async () => {
  const port = await freePort();
  const dead = `redis://127.0.0.1:${port}`;
  const closed = Backend.redis(dead, { deadlineMs: 100, connectTimeoutMs: 100 });
  // Something listens on the port after 5 s (and never answers): a call that waited for a
  // connection instead of settling at its deadline would then hang on it. An ordering: the call
  // must settle before.
  const late = net.createServer((socket) => socket.on('error', () => {}));
  const appears = watchdog(5_000, () => late.listen(port, '127.0.0.1'));
  const error = await closed.tokenBucket('t', 10, 10).check('k').catch((e) => e);
  assert.ok(!appears.stop(), 'settled only after something listened on the port');
  late.close();
  assert.ok(['ERR_BACKEND_UNAVAILABLE', 'ERR_TIMEOUT'].includes(error.code), error.message);
  assert.equal(closed.stats().failed, 1);

  const open = Backend.redis(dead, { deadlineMs: 100, failurePolicy: 'fail_open' });
  const allowed = await open.tokenBucket('t', 10, 10).check('k');
  assert.equal(allowed.allowed, true);
  assert.equal(open.stats().failedOpen, 1);

  const fallback = Backend.redis(dead, { deadlineMs: 100, failurePolicy: { fallback: 2 } });
  const limiter = fallback.bucket('f', 4, '1m');
  const decisions = [];
  for (let i = 0; i < 3; i++) decisions.push(await limiter.check('k'));
  assert.deepEqual(decisions.map((d) => d.allowed), [true, true, false], 'the fallback holds limit / 2');
  assert.equal(decisions[0].limit, 2);
  assert.equal(fallback.stats().fellBack, 3);
});

test('a dead Redis: concurrent limiters fail closed under fail_open and fallback unless they allow fallback', async () => {
  const dead = `redis://127.0.0.1:${await freePort()}`;
  for (const failurePolicy of ['fail_open', { fallback: 1 }]) {
    const backend = Backend.redis(dead, { deadlineMs: 100, connectTimeoutMs: 100, failurePolicy });
    const mutex = backend.concurrent('m', 1, { lockTimeoutMs: 60000 });
    assert.equal(mutex.allowsFallback, false);
    assert.equal(backend.bucket('b', 4, '1m').allowsFallback, true);
    const error = await mutex.check('k').catch((e) => e);
    assert.ok(['ERR_BACKEND_UNAVAILABLE', 'ERR_TIMEOUT'].includes(error.code), error.message);
    assert.equal(backend.stats().failed, 1);
    const opted = backend.concurrent('m', 1, { lockTimeoutMs: 60000, allowFallback: true });
    assert.equal(opted.allowsFallback, true);
    const granted = await opted.check('k');
    assert.equal(granted.allowed, true);
    // fail_open: a lease that guards nothing; fallback: this process's own mutex.
    assert.equal(granted.lease.fencingToken === 0, failurePolicy === 'fail_open');
    if (failurePolicy !== 'fail_open') {
      assert.equal((await opted.check('k')).allowed, false);
      await opted.extend(granted.lease);
    }
    await opted.release(granted.lease);
  }
});

test('a bare number where a duration goes is refused in every positional place, saying why (issue 46: it meant ms here, s elsewhere)', async () => {
  const throwsBare = (parameter) => (error) => {
    assert.equal(error.code, 'ERR_INVALID_ARGUMENT');
    assert.equal(error.parameter, parameter);
    assert.match(error.message, /must be a string with its unit \('60s', '500ms', '1m' or 'minute'\), got the bare number 60/);
    assert.match(error.message, /seconds in Python, Ruby, C and specs/);
    return true;
  };
  assert.throws(() => backend.bucket('b', 5, 60), throwsBare('interval'));
  assert.throws(() => backend.window('b', 5, 60), throwsBare('interval'));
  assert.throws(() => backend.leaky('l', 5, 60), throwsBare('drain'));
  assert.throws(() => backend.points('p', 5, 60), throwsBare('refill'));
  assert.throws(() => bucket.withMaxPause(60), throwsBare('maxPause'));
  assert.throws(() => bucket.withBlockFor(60), throwsBare('blockFor'));
  assert.throws(() => bucket.withWaitTimeout(60), throwsBare('waitTimeout'));
  await assert.rejects(bucket.pause(60, 'k'), throwsBare('duration'));
  await assert.rejects(bucket.block(60, 'k'), throwsBare('duration'));
});

test('durations with units and rate strings mean the same as the spec says (issue 46)', () => {
  const interval = (limiter) => JSON.parse(limiter.specJson).interval;
  assert.equal(interval(backend.window('w1', 5, '60s')), 60);
  assert.equal(interval(backend.window('w2', 5, '1m')), 60);
  assert.equal(interval(backend.window('w3', 5, 'minute')), 60);
  assert.equal(interval(backend.bucket('b1', 5, '500ms')), 0.5);
  const rate = JSON.parse(backend.window('w4', '5/minute').specJson);
  assert.deepEqual([rate.kind, rate.limit, rate.interval], ['window', 5, 60]);
  const perHour = JSON.parse(backend.bucket('b2', '100 per hour', { waitTimeoutMs: 0 }).specJson);
  assert.deepEqual([perHour.kind, perHour.limit, perHour.interval], ['bucket', 100, 3600]);
  assert.equal(backend.bucket('b3', '100 per hour', { waitTimeoutMs: 0 }).waitTimeoutMs, 0);
  const both = JSON.parse(backend.windows('w5', '25/5s; 300/minute').specJson);
  assert.deepEqual(both.windows, [[25, 5], [300, 60]]);
  assert.equal(bucket.withWaitTimeout('2s').waitTimeoutMs, 2000);
  assert.equal(bucket.withWaitTimeout('0s').waitTimeoutMs, 0);
  assert.equal(bucket.withMaxPause('10m').maxPauseMs, 600_000);
  assert.equal(bucket.withBlockFor('15m').blockForMs, 900_000);
});
