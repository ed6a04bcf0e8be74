'use strict';
// One limit shared by a Python app and a Node app through one Redis: the Express example app
// (ratekeeper/express, window('api', 100, 'minute')) and a Starlette app under uvicorn with
// ratekeeper's ASGI middleware and the same limiter, hit at once by client processes on both;
// the totals are exact, and both send the same RateLimit header fields. Needs the venv of scripts/test-python (RATEKEEPER_PY_VENV, else .venv):
// without one the test skips, unless RK_REQUIRE_PYTHON=1 (scripts/test-node) makes it fail.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { RedisServer } = require('./support/redis.js');
const { startApp, hammer, venvPython } = require('./support/http-apps.js');

test('a Python app and a Node app share one 100/minute limit exactly', async (t) => {
  const python = venvPython();
  const usable = python !== null && spawnSync(python, ['-c', 'import ratekeeper.asgi, uvicorn']).status === 0;
  if (!usable) {
    assert.notEqual(process.env.RK_REQUIRE_PYTHON, '1', 'no venv with ratekeeper, starlette and uvicorn: run scripts/test-python first');
    t.skip('no venv with the ratekeeper Python package, starlette and uvicorn (run scripts/test-python)');
    return;
  }
  const redis = await RedisServer.start();
  const env = { REDIS_URL: `redis://127.0.0.1:${redis.port}` };
  const apps = [];
  try {
    apps.push(await startApp('express.cjs', env));
    apps.push(await startApp(path.join(__dirname, 'support', 'py_asgi_app.py'), env, python));
    const [node, py] = apps;
    // The same fields from both languages (the first request of each: 99 left, then 98).
    const [a, b] = [await fetch(`${node.url}/`), await fetch(`${py.url}/`)];
    for (const r of [a, b]) assert.equal(r.headers.get('ratelimit-policy'), '"api";q=100;w=60');
    assert.match(a.headers.get('ratelimit'), /^"api";r=99;t=\d+$/);
    assert.match(b.headers.get('ratelimit'), /^"api";r=98;t=\d+$/);
    const [fromNode, fromPython] = await Promise.all([
      hammer(`${node.url}/`, { processes: 2, requests: 40, concurrency: 2 }),
      hammer(`${py.url}/`, { processes: 2, requests: 40, concurrency: 2 }),
    ]);
    const admitted = (fromNode[200] ?? 0) + (fromPython[200] ?? 0);
    const refused = (fromNode[429] ?? 0) + (fromPython[429] ?? 0);
    assert.deepEqual({ admitted, refused }, { admitted: 98, refused: 62 }, JSON.stringify({ fromNode, fromPython }));
    assert.ok(fromNode[200] > 0 && fromPython[200] > 0, 'both apps admitted some');
  } finally {
    await Promise.all(apps.map((a) => a.stop()));
    await redis.destroy();
  }
});
