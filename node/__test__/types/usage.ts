// Compiled (never run) by types.test.js with `tsc --strict --noEmit`: the typings describe the
// API as written in the README, and reject misuse (`@ts-expect-error` lines must be errors).
import {
  Backend,
  Limiter,
  ManualClock,
  FleetShedder,
  UtilizationShedder,
  SKIPPED,
  codes,
  isRatekeeperError,
  rateLimitHeaders,
  setRateLimitHeaders,
  httpStatus,
  type CombinedDecision,
  type Decision,
  type Lease,
  type Permit,
  type RatekeeperError,
} from '../../index';

async function main(): Promise<void> {
  const clock = new ManualClock(1_700_000_000_000_000);
  const memory: Backend = Backend.memory({ maxKeys: 1000, clock });
  const redis = Backend.redis('redis://127.0.0.1:6380', {
    prefix: 'app',
    failurePolicy: { fallback: 4 },
    deadlineMs: 100,
    tls: { ca: 'PEM' },
  });
  Backend.cluster(['redis://127.0.0.1:7000'], { failurePolicy: 'fail_open' });
  const api: Limiter = redis.tokenBucket('api', 10, 20);
  const d: Decision = await api.check('user-42');
  const allowed: boolean = d.allowed;
  const retry: number = d.retryAfterMs + d.resetAfterMs + d.limit + d.remaining + d.decidedAtUs;
  const sync: Decision = memory.bucket('b', 5, 'minute').checkSync(null, 2);
  const ingest: Limiter = redis.partitions('ingest', 100, 20, { leaseTtlMs: 15_000, reserved: 2, priority: false });
  const heldPartitions: Array<[number, number]> = ingest.partitionsHeld();
  console.log(heldPartitions.length);
  await ingest.close();
  memory.limiter('p', { kind: 'partitions', total_rate: 100, partitions: 20, lease_ttl: 15 });
  // The options every spec may carry (the LLM gateway guide's specs).
  memory.limiter('q', { kind: 'bucket', limit: 5, interval: 60, colocate: 'tenant', block_for: 3600, shadow: true });
  // @ts-expect-error: colocate is 'identity' or 'tenant'
  memory.limiter('r', { kind: 'bucket', limit: 5, interval: 60, colocate: 'slot' });
  const quota = memory.bucket('quota', 1000, 'day');
  const inFlight = memory.concurrent('in-flight', 4);
  const combined: CombinedDecision = await memory.checkAll([
    { limiter: quota, key: 'acme', cost: 2 },
    { limiter: inFlight, key: 'acme' },
  ]);
  const partRetry: number = combined.retryAfterMs + combined.parts[0].decision.retryAfterMs;
  const partLimiter: Limiter = combined.parts[1].limiter;
  console.log(combined.allowed, partRetry, partLimiter.name);
  await combined.release();
  await memory.acquireAll([{ limiter: quota }], { waitTimeoutMs: 100, signal: new AbortController().signal });
  // @ts-expect-error a part is an object with a limiter, not a tuple
  await memory.checkAll([[quota, 'acme', 1]]);
  // @ts-expect-error the cost is a number
  await memory.checkAll([{ limiter: quota, cost: '2' }]);
  const erp = memory.concurrent('erp', 50, { lockTimeoutMs: 30_000, waitTimeoutMs: 5000 });
  const granted = await erp.acquire('tenant-3', { waitTimeoutMs: 1000, signal: AbortSignal.timeout(100) });
  const lease: Lease | undefined = granted.lease;
  if (lease) {
    const token: number = lease.fencingToken;
    const id: string = lease.id;
    await erp.extend(lease);
    await erp.release(lease);
    void token;
    void id;
  }
  const result: number = await erp.withinLimit(async (permit: Permit) => permit.decision.remaining);
  const maybe: string | typeof SKIPPED = await erp.withinLimit(() => 'done', { policy: 'ignore', key: 'k' });
  const points = memory.points('shopify', 1000, '20s');
  await points.withinLimit(async (permit) => permit.pointsUsed(50), { key: 'shop', cost: 200 });
  const after: Decision = await points.pointsUsed('shop', 200, 50);
  memory.windows('w', [{ limit: 25, intervalMs: 5000 }, { limit: 300, intervalMs: 60_000 }]);
  memory.slidingWindow('s', [{ durationMs: 1000, limit: 10, precisionMs: 100 }, ['1m', 100]]);
  memory.leaky('l', 10, '1s');
  memory.window('win', 10, '1s');
  memory.window('login', '5/minute');
  memory.bucket('api', '100 per hour', { waitTimeoutMs: 0 });
  memory.windows('api', '25/5s; 300/minute');
  // @ts-expect-error a bare number is not a duration (it meant ms here, s elsewhere)
  memory.window('win', 10, 1000);
  Limiter.unlimited();
  const metrics = erp.metrics();
  const fleet = await erp.fleetMetrics();
  const held: number = metrics.held + fleet.waitTimeMs;
  await api.reset('user-42');
  await api.peek();
  const shedder = new FleetShedder(redis, 'fleet', 200);
  const ticket: Lease | null = await shedder.enter(false);
  await shedder.leave(ticket);
  await shedder.run(async () => 1, { critical: true });
  const utilization = new UtilizationShedder({ endOfGood: 0.7, clock });
  utilization.observe(0.9);
  utilization.check(2);
  const chance: number = utilization.dropChance(3) + utilization.shedding();
  clock.advance(100);
  clock.advanceUs(1);
  const now: number = clock.nowUs;
  const headers: Record<string, string> = rateLimitHeaders(d);
  const status: 429 | 503 | undefined = httpStatus(d);
  setRateLimitHeaders({ setHeader: () => undefined }, d);
  try {
    await api.acquire();
  } catch (error) {
    if (isRatekeeperError(error) && error.code === codes.OVER_LIMIT) {
      const ms: number | undefined = error.retryAfterMs;
      void ms;
    }
    const e = error as RatekeeperError;
    void e.parameter;
  }
  // Upstream feedback: a pause, and the headers of any client.
  const pausedFor: number = await erp.pause('3s', 'stripe');
  const fromObject: number | null = await erp.observe(429, { 'retry-after': '3' }, 'stripe');
  const fromHeaders: number | null = await erp.observe(503, new Headers({ 'Retry-After': '3' }));
  const fromPairs: number | null = await erp.observe(429, [['Retry-After', '3']]);
  const fromResponse: number | null = await erp.observeResponse(new Response(null, { status: 429 }), 'stripe');
  void [pausedFor, fromObject, fromHeaders, fromPairs, fromResponse];
  // @ts-expect-error a positional duration carries its unit
  await erp.pause(3000);
  // @ts-expect-error a status is a number
  await erp.observe('429', {});
  // @ts-expect-error limits are numbers
  memory.bucket('b', '5', '1s');
  // @ts-expect-error unknown named interval
  memory.bucket('b', 5, 'week');
  // @ts-expect-error failure policies are named
  Backend.redis('redis://x', { failurePolicy: 'sometimes' });
  // @ts-expect-error a decision is not a lease
  await erp.release(d);
  void [allowed, retry, sync, result, maybe, after, held, chance, now, headers, status, memory.stats().failedOpen];
}

void main;

// Backoff and ratekeeper/bullmq.
import { Backoff } from '../../index';
import { limited, currentDecision, reschedules, RESCHEDULES } from '../../bullmq';
import type { Job } from 'bullmq';

const backoffPolicy = new Backoff({ baseMs: 1000, jitterMs: 0, maxReschedules: 5, delay: (n) => n * 10, seed: 1 });
const nextRunMs: number | null = backoffPolicy.rescheduleIn(1, 250);
// @ts-expect-error: the attempt is a number
backoffPolicy.rescheduleIn('1');
const processor = limited(
  Backend.memory().tokenBucket('bq', 10, 10),
  async (job: Job<{ n: number }>) => {
    const d: Decision | undefined = currentDecision();
    return { n: job.data.n, at: d?.decidedAtUs, reschedules: reschedules(job), field: RESCHEDULES };
  },
  { key: (job) => String(job.data.n), backoff: backoffPolicy },
);
const processed: Promise<{ n: number; at: number | undefined; reschedules: number; field: string }> = processor(
  {} as Job<{ n: number }>,
  'token',
);
void nextRunMs;
void processed;
