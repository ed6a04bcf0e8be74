// Testing code that rate-limits without sleeping: a ManualClock moves only when told to.
// Run it with `node --test`, or as a script (the docs' example runner does that).
const assert = require('node:assert/strict');
const test = require('node:test');
const { Backend, ManualClock } = require('ratekeeper');

/** The code under test: at most 3 password-reset emails per user per hour. */
async function sendResetEmail(limiter, user) {
  return (await limiter.check(user)).allowed;
}

test('reset emails are limited per user per hour', async () => {
  const clock = new ManualClock(); // starts at the current time, then stands still
  const backend = Backend.memory({ clock }); // Backend.redis(url, { clock }) works too
  const resets = backend.window('password-reset', 3, 'hour');

  const sent = [];
  for (let i = 0; i < 4; i++) sent.push(await sendResetEmail(resets, 'ada'));
  assert.deepEqual(sent, [true, true, true, false]);
  assert.equal((await resets.check('ada')).retryAfterMs, 3_600_000); // exact: the clock has not moved
  assert.equal(await sendResetEmail(resets, 'grace'), true); // another key has a limit of its own

  clock.advance(3_599_000); // milliseconds, like every Node duration
  assert.equal(await sendResetEmail(resets, 'ada'), false);
  clock.advance(1_000); // an hour after the first three, in no time
  assert.equal(await sendResetEmail(resets, 'ada'), true);
  console.log('passed: 3 per user per hour');
});
