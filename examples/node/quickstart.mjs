import { Backend } from 'ratekeeper';

const backend = Backend.redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'); // or Backend.memory()
const api = backend.tokenBucket('stripe', 10, 20);   // 10/s, bursts of 20
const d = await api.check('user-42');                // never waits; a refusal consumes nothing
console.log(`allowed: ${d.allowed}, remaining: ${d.remaining}`);
if (!d.allowed) console.log(`retry in ${d.retryAfterMs} ms`);
