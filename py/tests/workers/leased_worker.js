// A Node process of the leased-fleet test (py/tests/test_leased_fleet.py): the same steps as
// leased_worker.py, with `backend.leased`, `checkSync` and `await acquire`.
// Usage: node leased_worker.js PACKAGE_DIR URL PREFIX NAME RATE CAPACITY CHUNK TTL SECONDS
'use strict';

const [packageDir, url, prefix, name, rate, capacity, chunk, ttl, seconds] = process.argv.slice(2);
const { Backend } = require(packageDir);
const readline = require('node:readline');

async function main() {
  const backend = Backend.redis(url, { prefix, deadlineMs: 2000 });
  const limiter = backend.leased(name, Number(rate), Number(capacity), {
    chunk: Number(chunk),
    leaseTtlMs: Number(ttl) * 1000,
  });
  console.log('ready');
  const lines = readline.createInterface({ input: process.stdin });
  const [line] = await Promise.all([new Promise((resolve) => lines.once('line', resolve))]);
  lines.close();
  if (line.trim() !== 'go') throw new Error(`expected go, got ${line}`);
  let admitted = 0;
  let calls = 0;
  const first = Date.now();
  const deadline = performance.now() + Number(seconds) * 1000;
  while (performance.now() < deadline) {
    calls += 1;
    if (calls % 2) {
      if (limiter.checkSync().allowed) admitted += 1;
    } else {
      try {
        await limiter.acquire(null, { waitTimeoutMs: 50 });
        admitted += 1;
      } catch (error) {
        if (error.code !== 'ERR_OVER_LIMIT') throw error;
      }
    }
  }
  const last = Date.now();
  await limiter.close();
  console.log(JSON.stringify({ admitted, calls, first, last }));
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
