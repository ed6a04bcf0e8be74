'use strict';
// `Backoff` through the Node binding: milliseconds, the user function, the errors. The
// arithmetic is the core's (unit-tested there).

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backoff } = require('..');

test('defaults are Sidekiq linear backoff, jitter within bounds', () => {
  const b = new Backoff({ seed: 1 });
  assert.deepEqual([b.baseMs, b.jitterMs, b.maxReschedules], [300_000, 300_000, 20]);
  for (let attempt = 1; attempt <= 20; attempt++) {
    for (let i = 0; i < 50; i++) {
      const d = b.rescheduleIn(attempt);
      assert.ok(d >= 300_000 * attempt && d < 300_000 * attempt + 300_000, `attempt ${attempt}: ${d}`);
    }
  }
  assert.equal(b.rescheduleIn(21), null);
  assert.equal(b.rescheduleIn(2 ** 40), null);
});

test('retryAfterMs is a floor; a seed repeats its draws', () => {
  const exact = new Backoff({ baseMs: 1000, jitterMs: 0, maxReschedules: 3 });
  assert.equal(exact.rescheduleIn(1, 2500), 2500);
  assert.equal(exact.rescheduleIn(3, 250), 3000);
  assert.equal(exact.rescheduleIn(4, 250), null);
  const draws = (seed) => [1, 2, 3].map((n) => new Backoff({ seed }).rescheduleIn(n, 1000));
  assert.deepEqual(draws(9), draws(9));
  assert.notDeepEqual(draws(9), draws(10));
});

test('a delay function replaces baseMs * attempt', () => {
  const seen = [];
  const b = new Backoff({ delay: (n) => (seen.push(n), 500 * n), jitterMs: 0, maxReschedules: 2 });
  assert.equal(b.rescheduleIn(2, 100), 1000);
  assert.equal(b.rescheduleIn(1, 3000), 3000);
  assert.equal(b.rescheduleIn(3), null);
  assert.deepEqual(seen, [2, 1]); // not called for an attempt that gives up
  const boom = new Backoff({
    delay: () => {
      throw new RangeError('boom');
    },
  });
  assert.throws(() => boom.rescheduleIn(1), RangeError);
});

test('bad options and arguments are ERR_INVALID_ARGUMENT naming the parameter', () => {
  const cases = [
    [{ baseMs: -1 }, 'baseMs'],
    [{ jitterMs: 'x' }, 'jitterMs'],
    [{ jitterMs: 1e15 }, 'jitterMs'],
    [{ maxReschedules: -1 }, 'maxReschedules'],
    [{ maxReschedules: 2 ** 32 }, 'maxReschedules'],
    [{ maxReschedules: 1.5 }, 'maxReschedules'],
    [{ delay: 5 }, 'delay'],
    [{ seed: -1 }, 'seed'],
  ];
  for (const [options, parameter] of cases) {
    assert.throws(() => new Backoff(options), { code: 'ERR_INVALID_ARGUMENT', parameter }, JSON.stringify(options));
  }
  const b = new Backoff();
  assert.throws(() => b.rescheduleIn(), { code: 'ERR_INVALID_ARGUMENT', parameter: 'attempt' });
  assert.throws(() => b.rescheduleIn(0), { code: 'ERR_INVALID_ARGUMENT', parameter: 'attempt' });
  assert.throws(() => b.rescheduleIn(1, -5), { code: 'ERR_INVALID_ARGUMENT', parameter: 'retryAfterMs' });
  assert.throws(() => new Backoff({ delay: () => 'x' }).rescheduleIn(1), {
    code: 'ERR_INVALID_ARGUMENT',
    parameter: 'delay',
  });
});
