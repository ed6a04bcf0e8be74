// An LLM gateway: every request passes a per-user token rate, a per-tenant monthly token quota
// and a per-tenant concurrency cap, checked together with the estimated tokens (prompt + max
// output) and settled with the real usage once the model has answered. An abusive API key is
// blocked for an hour after going over its request rate.
//
// The model is simulated (a seeded generator), so the report is the same on every run from an
// empty Redis.
const { Backend } = require('ratekeeper');

const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { prefix: 'llm-gateway' });
// The three limits of a request share the tenant as the first part of their keys (colocate:
// 'tenant'), so on a Redis Cluster they live in one slot and checkAll stays one atomic script.
const tokens = backend.limiter('user-tokens', { kind: 'token_bucket', rate: 1, capacity: 12_000, colocate: 'tenant' });
const quota = backend.limiter('tenant-quota', { kind: 'calendar', limit: 20_000, period: 'month', anchor: 15, colocate: 'tenant' });
const inFlight = backend.limiter('tenant-in-flight', { kind: 'concurrent', limit: 2, lock_timeout: 120, colocate: 'tenant' });
// Per API key: 20 requests a minute; a key that goes over is kept out for an hour, fleet-wide,
// and this process remembers the refusal (the deny cache): the blocked key's next requests are
// refused without a round trip to Redis.
const requests = backend
  .limiter('key-requests', { kind: 'window', limit: 20, interval: 60, block_for: 3600 })
  .withDenyCache(true);
// Being rolled out: at most 6 requests per tenant an hour. In shadow mode it decides and counts
// as if enforced but never refuses; once its shadow refusals look right, a live override
// without "shadow" enforces it in every process.
const hourly = backend.limiter('tenant-hourly', { kind: 'window', limit: 6, interval: 3600, shadow: true, colocate: 'tenant' });

const MAX_OUTPUT = 2_000;

// The simulated model: a small seeded generator (mulberry32), same answers every run.
function seeded(seed) {
  let state = seed >>> 0;
  return (low, high) => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const unit = ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    return low + Math.floor(unit * (high - low + 1));
  };
}
const model = seeded(10);

const report = { admitted: 0, byRate: 0, byQuota: 0, byConcurrency: 0, byKey: 0, settledBack: 0 };

// Serves requests that arrive together: each holds its tenant's concurrency slot until the whole
// wave has been answered.
async function serve(wave) {
  const admitted = [];
  for (const [tenant, user] of wave) {
    if (!(await requests.check(`${tenant}:${user}`)).allowed) {
      report.byKey += 1;
      continue;
    }
    const prompt = model(200, 1_200);
    const estimate = prompt + MAX_OUTPUT;
    const combined = await backend.checkAll([
      { limiter: tokens, key: `${tenant}:${user}`, cost: estimate },
      { limiter: quota, key: tenant, cost: estimate },
      { limiter: inFlight, key: tenant, cost: 1 },
      { limiter: hourly, key: tenant, cost: 1 },
    ]);
    const [rate, month, slots] = combined.parts.map((part) => part.decision);
    if (!combined.allowed) {
      if (!slots.allowed) report.byConcurrency += 1;
      else if (!month.allowed) report.byQuota += 1;
      else report.byRate += 1;
      continue;
    }
    report.admitted += 1;
    const used = prompt + model(100, MAX_OUTPUT); // what the response says it used
    await tokens.settle(rate, used);
    await quota.settle(month, used);
    report.settledBack += estimate - used;
    admitted.push(combined);
  }
  for (const combined of admitted) await combined.release(); // frees the concurrency slots
}

async function main() {
  for (const [limiter, key] of [
    [tokens, 'acme:alice'], [tokens, 'acme:bob'], [tokens, 'globex:mallory'],
    [requests, 'acme:alice'], [requests, 'acme:bob'], [requests, 'globex:mallory'],
    [quota, 'acme'], [quota, 'globex'], [inFlight, 'acme'], [inFlight, 'globex'], [hourly, 'acme'], [hourly, 'globex'],
  ]) {
    await limiter.reset(key);
  }

  for (let i = 0; i < 6; i += 1) {
    await serve([['acme', 'alice'], ['acme', 'bob'], ['acme', 'alice']]); // three at once: one over the cap
  }
  for (let i = 0; i < 30; i += 1) await serve([['globex', 'mallory']]); // a script hammering the gateway

  console.log(`admitted: ${report.admitted}`);
  console.log(`refused by the user's token rate: ${report.byRate}`);
  console.log(`refused by the tenant's monthly quota: ${report.byQuota}`);
  console.log(`refused by the tenant's concurrency cap: ${report.byConcurrency}`);
  console.log(`refused by the API key's block: ${report.byKey}`);
  console.log(`tokens settled back: ${report.settledBack}`);
  console.log(`refused locally (deny cache): ${requests.metrics().refusedLocally}`);
  console.log(`would be refused by the new hourly cap (shadow mode): ${hourly.metrics().shadowRefused}`);
  const [acme, globex] = [await quota.peek('acme'), await quota.peek('globex')];
  console.log(`quota left this month: acme ${acme.remaining}, globex ${globex.remaining}`);
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
