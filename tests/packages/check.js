// One real check against the Redis at $REDIS_URL through the installed npm packages
// (scripts/test-packages runs it in a fresh npm project with no Rust toolchain reachable).
'use strict';
const assert = require('node:assert');
const path = require('node:path');
const { Backend } = require('ratekeeper');

async function main() {
  // The addon must be this machine's prebuilt one (linux-x64-gnu, linux-arm64-gnu), not a build
  // from source.
  const addon = require.resolve(`@ratekeeper/linux-${process.arch}-gnu`);
  assert.ok(addon.includes(`${path.sep}node_modules${path.sep}`), addon);
  const backend = Backend.redis(process.env.REDIS_URL, { prefix: 'packages-node' });
  const limiter = backend.tokenBucket('installed', 1, 1);
  const first = await limiter.check();
  const second = await limiter.check();
  console.log(`node (${process.arch}, ${process.version}): allowed=${first.allowed} then allowed=${second.allowed} retryAfterMs=${second.retryAfterMs}`);
  // A bucket of one: the first check is allowed, the second refused.
  assert.ok(first.allowed && !second.allowed && second.retryAfterMs > 0);
  // In the registry before the process ends: the installed CLI's `limits` lists it next.
  await backend.flush();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
