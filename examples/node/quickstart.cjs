const { Backend } = require('ratekeeper');

async function main() {
  const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'); // or Backend.memory()
  const api = backend.tokenBucket('stripe', 10, 20);   // 10/s, bursts of 20
  const d = await api.check('user-42');                // never waits; a refusal consumes nothing
  console.log(`allowed: ${d.allowed}, remaining: ${d.remaining}`);
  if (!d.allowed) console.log(`retry in ${d.retryAfterMs} ms`);

  const erp = backend.concurrent('erp', 50, { lockTimeoutMs: 30_000 });
  await erp.withinLimit(() => callErp(), { key: 'tenant-3' }); // acquire, run, release
  // errors: err.code === 'ERR_OVER_LIMIT' (err.retryAfterMs), 'ERR_INVALID_ARGUMENT' (err.parameter), …
}

async function callErp() {
  console.log('called the ERP');
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
