'use strict';
// One limit shared by a Python app and a Node app through one Redis: the Express example app
// (ratekeeper/express, window('api', 100, 'minute')) and a Python HTTP app checking the same
// limiter with the ratekeeper Python package, hit at once by client processes on both; the
// totals are exact. Needs the venv of scripts/test-python (RATEKEEPER_PY_VENV, else .venv):
// without one the test skips, unless RK_REQUIRE_PYTHON=1 (scripts/test-node) makes it fail.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { RedisServer } = require('./support/redis.js');
const { startApp, hammer, venvPython } = require('./support/http-apps.js');

test('a Python app and a Node app share one 100/minute limit exactly', async (t) => {
  const python = venvPython();
  const usable = python !== null && spawnSync(python, ['-c', 'import ratekeeper']).status === 0;
  if (!usable) {
    assert.notEqual(process.env.RK_REQUIRE_PYTHON, '1', 'no venv with ratekeeper: run scripts/test-python first');
    t.skip('no venv with the ratekeeper Python package (run scripts/test-python)');
    return;
  }
  const redis = await RedisServer.start();
  const env = { REDIS_URL: `redis://127.0.0.1:${redis.port}` };
  const apps = [];
  try {
    apps.push(await startApp('express.cjs', env));
    apps.push(await startApp(path.join(__dirname, 'support', 'py_http_app.py'), env, python));
    const [node, py] = apps;
    const [fromNode, fromPython] = await Promise.all([
      hammer(`${node.url}/`, { processes: 2, requests: 40, concurrency: 2 }),
      hammer(`${py.url}/`, { processes: 2, requests: 40, concurrency: 2 }),
    ]);
    const admitted = (fromNode[200] ?? 0) + (fromPython[200] ?? 0);
    const refused = (fromNode[429] ?? 0) + (fromPython[429] ?? 0);
    assert.deepEqual({ admitted, refused }, { admitted: 100, refused: 60 }, JSON.stringify({ fromNode, fromPython }));
    assert.ok(fromNode[200] > 0 && fromPython[200] > 0, 'both apps admitted some');
  } finally {
    await Promise.all(apps.map((a) => a.stop()));
    await redis.destroy();
  }
});
