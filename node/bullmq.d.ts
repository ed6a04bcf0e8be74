// Types of `ratekeeper/bullmq` (bullmq.js).

import type { Job } from 'bullmq';
import type { Backoff, Decision, Limiter } from './index';

/** The job-data field counting a job's reschedules for being over limit. */
export declare const RESCHEDULES: 'ratekeeperReschedules';

/** Options of `limited()`. */
export interface LimitedOptions<J extends Job = Job> {
  /** The identity to limit: a string, `null` (the limiter's shared key) or a function of the job. */
  key?: string | null | ((job: J) => string | null);
  /** Units to take (default 1), or a function of the job. */
  cost?: number | ((job: J) => number);
  /** When to run a refused job again and when to give up (default: Sidekiq's, `new Backoff()`). */
  backoff?: Backoff;
}

/**
 * Wraps a BullMQ processor so it runs only when `limiter` admits the job, and is rescheduled
 * (`job.moveToDelayed` + `DelayedError`, keeping its attempts) with `backoff` when it does not.
 * After `backoff.maxReschedules` reschedules the job fails with the over-limit error.
 */
export declare function limited<J extends Job = Job, R = unknown>(
  limiter: Limiter,
  processor: (job: J, token?: string, ...rest: any[]) => Promise<R> | R,
  options?: LimitedOptions<J>,
): (job: J, token?: string, ...rest: any[]) => Promise<R>;

/** The decision that admitted the running processor (undefined outside a limited processor). */
export declare function currentDecision(): Decision | undefined;

/** How many times `job` was rescheduled for being over limit (0 on its first run). */
export declare function reschedules(job: Job): number;
