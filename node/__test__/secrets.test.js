'use strict';
// A Redis password never shows (issue #31, item 9): URLs carry it (`redis://user:PASSWORD@host`),
// and whatever the binding throws, rejects with, prints or returns about a backend hides it — a
// refused URL's error, a wrong password's error, util.inspect of backends and limiters, the
// registry and the metrics.

const test = require('node:test');
const assert = require('node:assert/strict');
const util = require('node:util');
const { Backend } = require('..');
const { RedisServer } = require('./support/redis.js');

const SECRET = 'Pa55-w0rd-9f3e';

/** Everything a user sees of an error: util.inspect shows the stack, the code, the cause chain. */
function shown(error) {
  return `${util.inspect(error, { depth: 10 })}\n${error && error.stack}\n${JSON.stringify(error)}`;
}

test('refused URLs hide their password', () => {
  const refused = [
    ['url', () => Backend.redis(`redix://user:${SECRET}@127.0.0.1:1`)], // issue #31's example
    ['url', () => Backend.redis(`user:${SECRET}@127.0.0.1:6380`)], // no scheme
    ['url', () => Backend.redis(`redis://user:${SECRET}@127.0.0.1:notaport`)],
    ['seeds[1]', () => Backend.cluster(['redis://127.0.0.1:1', `http://:${SECRET}@127.0.0.1:2`])],
  ];
  for (const [parameter, make] of refused) {
    let error;
    try {
      make();
    } catch (e) {
      error = e;
    }
    assert.ok(error, `${parameter}: refused`);
    assert.equal(error.code, 'ERR_INVALID_ARGUMENT', error.message);
    assert.equal(error.parameter, parameter, error.message);
    assert.ok(!shown(error).includes(SECRET), shown(error));
  }
});

test('a wrong password and a working backend hide it', async () => {
  const server = await RedisServer.start();
  try {
    // A user with a password (the default user stays open, so the fixture's own checks work).
    assert.equal(server.cli('ACL', 'SETUSER', 'alice', 'on', `>${SECRET}`, '~*', '&*', '+@all'), 'OK');
    const texts = [];
    const wrong = Backend.redis(`redis://alice:${SECRET}-wrong@127.0.0.1:${server.port}`, { prefix: 'sec' });
    const error = await wrong.window('secret-w', 1, '1s').check().then(() => null, (e) => e);
    assert.ok(error, 'a wrong password fails the check');
    texts.push(shown(error));
    const right = Backend.redis(`redis://alice:${SECRET}@127.0.0.1:${server.port}`, { prefix: 'sec' });
    const limiter = right.window('secret-w', 5, '1s');
    assert.ok((await limiter.check()).allowed, 'the right password works: the checks below see a live backend');
    await right.flush();
    texts.push(util.inspect(wrong), util.inspect(right), util.inspect(limiter));
    texts.push(JSON.stringify(await right.limiters()), await right.prometheus({ fleet: true }));
    for (const text of texts) assert.ok(!text.includes(SECRET), text);
    assert.match(texts[0], /WRONGPASS|password/i);
  } finally {
    await server.destroy();
  }
});
