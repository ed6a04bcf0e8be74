'use strict';
// check / checkSync / peek / peekSync reach the native limiter by a per-thread number (see
// HANDLES in node/src/limiter.rs). A number freed when its limiter is garbage-collected is
// reused by the next limiter: that one must see its own state, never a dead limiter's, and the
// limiters still alive must keep theirs.

const test = require('node:test');
const assert = require('node:assert/strict');
const v8 = require('node:v8');
const vm = require('node:vm');
const { Backend, Limiter } = require('..');

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

/** The handle index.js stored on a limiter (its one own symbol property). */
const handleOf = (limiter) => limiter[Object.getOwnPropertySymbols(limiter)[0]];

async function collect() {
  for (let i = 0; i < 4; i++) {
    gc();
    // napi finalisers run after the collection, from the event loop.
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test('a reused handle reaches its new limiter, and live limiters keep their state', async () => {
  const backend = Backend.memory();
  const kept = backend.tokenBucket('kept', 1e-3, 3);
  assert.equal(kept.checkSync('k').remaining, 2);
  (() => {
    for (let i = 0; i < 200; i++) backend.tokenBucket(`dropped-${i}`, 1e-3, 1).checkSync('k');
  })();
  await collect();
  let reused = 0;
  for (let i = 0; i < 200; i++) {
    const fresh = backend.tokenBucket(`fresh-${i}`, 1e-3, 5);
    assert.equal(fresh.checkSync('k').remaining, 4, `fresh limiter ${i} starts full`);
    assert.equal((await fresh.check('k')).remaining, 3);
    assert.equal(fresh.peekSync('k').remaining, 3);
    assert.equal((await fresh.peek('k')).remaining, 3);
    if (handleOf(fresh) <= 201) reused++;
  }
  assert.ok(reused > 0, 'the dropped limiters\' handles were reused (else this test proves nothing)');
  assert.equal(kept.checkSync('k').remaining, 1, 'the live limiter kept its own state');
});

test('the calls refuse a receiver that is not a Limiter', async () => {
  const limiter = Backend.memory().tokenBucket('t', 1, 1);
  assert.throws(() => Limiter.prototype.checkSync.call({}, 'k'));
  await assert.rejects(Limiter.prototype.check.call({}, 'k'));
  assert.throws(() => limiter.peekSync.call(null, 'k'));
  assert.equal(limiter.checkSync('k').allowed, true);
});
