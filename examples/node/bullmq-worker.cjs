// BullMQ: over the limit, the job is moved to delayed (its attempts untouched), not failed.
const { Queue, Worker } = require('bullmq');
const { Backend, Backoff } = require('ratekeeper');
const { limited } = require('ratekeeper/bullmq');

const url = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const connection = { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null };
const stripe = Backend.redis(url.href).bucket('stripe-api', 20, '10s'); // 20 calls per 10 s

const processor = limited(stripe, async (job) => `charged ${job.data.customerId}`, {
  key: (job) => null, // or a function of the job, e.g. its tenant
  backoff: new Backoff({ baseMs: 60_000, jitterMs: 30_000, maxReschedules: 20 }), // milliseconds
});

async function main() {
  const worker = new Worker('billing', processor, { connection });
  worker.on('completed', async (job, result) => {
    console.log(result);
    await Promise.all([worker.close(), queue.close()]);
  });
  const queue = new Queue('billing', { connection });
  await queue.add('charge', { customerId: 'cus_1' }, { attempts: 3 });
}

main();
