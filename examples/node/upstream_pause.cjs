// Pausing on an upstream 429: every process stops calling the partner until it said to.
const { Backend } = require('ratekeeper');

const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const partner = backend.tokenBucket('partner-api', 50, 50);

async function fetchPartner(url) {
  const d = await partner.check(); // refused while paused: retryAfterMs is what is left of the pause
  if (!d.allowed) {
    console.log(`not calling: retry in ${Math.round(d.retryAfterMs / 1000)}s`);
    return null;
  }
  const res = await fetch(url);
  const pausedMs = await partner.observeResponse(res); // 429/503 + Retry-After: pause every process
  if (pausedMs !== null) console.log(`${res.status}: every process pauses ${pausedMs / 1000}s`);
  return res;
}

async function main() {
  await fetchPartner(process.env.UPSTREAM_URL); // the partner answers 429, Retry-After: 30
  await fetchPartner(process.env.UPSTREAM_URL); // not sent
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
