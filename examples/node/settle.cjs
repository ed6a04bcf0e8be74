// Charging what an LLM call really cost: check with the estimate, settle with the actual usage,
// even from another process (a decision is a plain value: store it with the job).
const { Backend } = require('ratekeeper');

const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
// One million tokens per tenant per calendar month, from the billing day (the 15th).
const quota = backend.calendar('llm-quota', 1_000_000, 'month', { anchor: 15 });

async function main() {
  const estimate = 1_200 + 4_000; // prompt tokens + max output tokens
  const d = await quota.check('tenant-7', estimate);
  console.log(`checked ${estimate}: ${d.remaining} left this month`);
  const stored = JSON.stringify(d); // e.g. in the job that streams the answer
  const used = 1_200 + 350; // what the response says it used
  console.log(`settled to ${used}: ${(await quota.settle(JSON.parse(stored), used)).remaining} left`);
  console.log(`settled again: ${(await quota.settle(d, used)).remaining} left`); // applies nothing more
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
