'use strict';
// One Node process of the fleet-pause test (py/tests/test_upstream_fleet.py): the same loop as
// upstream_worker.py, with fetch and observeResponse.

const path = require('node:path');
const { Backend } = require(path.resolve(__dirname, '../../../node'));

// The token bucket (100/s) never refuses for longer than 10 ms: a longer refusal is the pause.
const PAUSE_LIKE_MS = 100;

async function main() {
  const [redisUrl, prefix, serverUrl, name] = process.argv.slice(2);
  const deadline = Date.now() + 30_000; // a bound for a test that went wrong
  const backend = Backend.redis(redisUrl, { prefix, deadlineMs: 5000, connectTimeoutMs: 5000 });
  const partner = backend.tokenBucket('partner', 100, 10);
  while (Date.now() < deadline) {
    const d = await partner.check();
    if (!d.allowed) {
      if (d.retryAfterMs > PAUSE_LIKE_MS) {
        console.log(`refused ${d.decidedAtUs} ${Math.round(d.retryAfterMs * 1000)}`);
      }
      await new Promise((resolve) => setTimeout(resolve, d.retryAfterMs));
      continue;
    }
    const res = await fetch(serverUrl, { headers: { 'X-Worker': name, 'X-Decided-At': String(d.decidedAtUs) } });
    await res.arrayBuffer();
    if (res.status === 410) break;
    await partner.observeResponse(res);
  }
  console.log('done');
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
