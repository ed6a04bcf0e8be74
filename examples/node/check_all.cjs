// Several limits at once, all or nothing: a per-user token rate, a per-tenant daily quota and a
// per-tenant concurrency cap, checked together so that a refusal by one wastes nothing of the
// others. The limiters co-locate by tenant (the part of the key before the first ':'), so on a
// Redis Cluster their keys share one slot and the check stays one atomic script.
const { Backend } = require('ratekeeper');

const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { prefix: 'check-all-node' });
const perUser = backend.limiter('tokens', { kind: 'token_bucket', rate: 100, capacity: 2000, colocate: 'tenant' });
const perTenant = backend.limiter('quota', { kind: 'bucket', limit: 5000, interval: 86400, colocate: 'tenant' });
const inFlight = backend.limiter('in-flight', { kind: 'concurrent', limit: 4, lock_timeout: 60, colocate: 'tenant' });

async function main() {
  await Promise.all([perUser.reset('acme:alice'), perTenant.reset('acme'), inFlight.reset('acme')]);
  const estimate = 1500; // prompt + max output tokens
  const parts = [
    { limiter: perUser, key: 'acme:alice', cost: estimate },
    { limiter: perTenant, key: 'acme', cost: estimate },
    { limiter: inFlight, key: 'acme' },
  ];
  const combined = await backend.checkAll(parts);
  console.log(`allowed: ${combined.allowed}, user tokens left: ${combined.parts[0].decision.remaining}`);
  try {
    // call the model here
  } finally {
    await combined.release(); // frees the concurrency slot
  }

  // A second request of the same size: the user's bucket has 500 left, so nothing is consumed.
  const again = await backend.checkAll(parts);
  console.log(`allowed: ${again.allowed}, retry after ${Math.round(again.retryAfterMs / 1000)} s`);
  console.log(`tenant quota left: ${(await perTenant.peek('acme')).remaining}`);
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
