// Types of the `ratekeeper` package. The public classes `Backend`, `Limiter` and `FleetShedder`
// are defined in JavaScript (index.js) over the native ones (`NativeBackend`, …), and are
// declared here; the other classes and the result and option shapes are the native layer's,
// generated from the Rust sources (native.d.ts, regenerated and checked by scripts/test-node).

import type {
  AcquireAllOptions,
  AcquireOptions,
  BackendStats,
  CalendarOptions,
  ConcurrentOptions,
  Decision,
  FleetShedderOptions,
  Lease,
  LeasedOptions,
  LimiterOptions,
  MemoryOptions,
  Metrics,
  PartitionsOptions,
  RedisOptions,
  SentinelOptions,
  SlidingLimitOptions,
  WindowLimitOptions,
} from './native';

export { Backoff, ManualClock, UtilizationShedder, coreVersion } from './native';
export type * from './native';

/** A unit a `Duration` may carry. */
export type DurationUnit =
  | 'ms' | 'millisecond' | 'milliseconds'
  | 's' | 'sec' | 'secs' | 'second' | 'seconds'
  | 'm' | 'min' | 'mins' | 'minute' | 'minutes'
  | 'h' | 'hr' | 'hrs' | 'hour' | 'hours'
  | 'd' | 'day' | 'days';

/**
 * A duration given where no name shows its unit (a positional argument): a string with its
 * unit, `'60s'`, `'500ms'`, `'1m'`, `'2 hours'`, or a unit alone, `'minute'`. A bare number is
 * refused there: `window('b', 5, 60)` meant 60 ms in Node and 60 s in Python, Ruby, C and
 * specs. Numbers are milliseconds only in options whose names end in `Ms` (`waitTimeoutMs`).
 */
export type Duration = `${number}${DurationUnit}` | `${number} ${DurationUnit}` | 'second' | 'minute' | 'hour' | 'day';

/**
 * A rate as `limits`, slowapi and flask-limiter write it: `'5/minute'`, `'100 per hour'`,
 * `'25/5s'`; several separated by `;` for `windows` (`'25/5s; 300/minute'`).
 */
export type RateText = `${number}/${string}` | `${number} per ${string}` | `${string};${string}`;

/** One part of `backend.checkAll` / `acquireAll`. */
export interface CheckAllPart {
  /** A limiter of the same backend (not a leased token bucket nor a partitions limiter). */
  limiter: Limiter;
  /** The key (default: the limiter's shared key). */
  key?: string | null;
  /** The cost (default 1). */
  cost?: number;
}

/** One part's decision in a `CombinedDecision`, in the order of the parts. */
export interface CombinedPart {
  /** The part's limiter. */
  limiter: Limiter;
  /** The part's key (absent: the limiter's shared key). */
  key?: string;
  /** The part's cost. */
  cost: number;
  /**
   * What this part decided at the combination's instant. In a refused combination a part may
   * say `allowed` (alone it would have passed) but consumed nothing and holds no lease.
   */
  decision: Decision;
}

/** What `checkAll` / `acquireAll` decided: every part admitted, or none consumed anything. */
export interface CombinedDecision {
  /** Whether every part was admitted; when false, no part consumed anything. */
  allowed: boolean;
  /** 0 when allowed; else the longest `retryAfterMs` of the parts that refused. */
  retryAfterMs: number;
  /** Each part's decision, in the order of the parts. */
  parts: CombinedPart[];
  /** Releases the lease of every admitted concurrent part. */
  release(): Promise<void>;
}

/** What `withinLimit` resolves with when `policy: 'ignore'` skipped the block. */
export declare const SKIPPED: unique symbol;

/** What `withinLimit` hands the block. */
export interface Permit {
  /** The decision that admitted the block. */
  readonly decision: Decision;
  /**
   * Reports the block's actual cost; the difference from the estimate (`cost`) is charged
   * (above the capacity: as debt, at most 16 capacities ahead) or refunded (points, token bucket
   * and leaky limiters). A permit reports once: a second report rejects with
   * `ERR_INVALID_ARGUMENT` naming `actual` and changes nothing.
   */
  pointsUsed(actual: number): Promise<Decision>;
}

/** Options of `limiter.withinLimit()`. */
export interface WithinLimitOptions {
  /** The identity to limit (default: the limiter's shared key). */
  key?: string | null;
  /** Units to take (default 1); for points limiters, the estimate. */
  cost?: number;
  /**
   * When the limit cannot be had within the wait: `'raise'` (default) rejects with
   * `ERR_OVER_LIMIT`; `'ignore'` skips the block and resolves with `SKIPPED`.
   */
  policy?: 'raise' | 'ignore';
  /** How long to wait at most (default: the limiter's `waitTimeoutMs`). */
  waitTimeoutMs?: number;
  /** Aborts the wait (`AbortError`, `code: 'ABORT_ERR'`). */
  signal?: AbortSignal;
}

/**
 * The options every spec may carry besides its kind's fields (durations in seconds): see
 * `withWaitTimeout`, `withBlockFor`, `withShadow` and the co-location rule of `checkAll`.
 */
export interface SpecOptions {
  wait_timeout?: number;
  block_for?: number;
  shadow?: boolean;
  colocate?: 'identity' | 'tenant';
}

/** A limiter spec as data: the same JSON in every language, durations in seconds. */
export type LimiterSpec = SpecOptions & (
  | { kind: 'token_bucket'; rate: number; capacity: number; wait_timeout?: number }
  | { kind: 'leased'; rate: number; capacity: number; chunk?: number; lease_ttl?: number; wait_timeout?: number }
  | { kind: 'bucket' | 'window'; limit: number; interval: number; wait_timeout?: number }
  | { kind: 'windows'; windows: Array<[limit: number, interval: number]>; wait_timeout?: number }
  | {
      kind: 'sliding_window';
      limits: Array<[duration: number, limit: number] | [duration: number, limit: number, precision: number | null]>;
      wait_timeout?: number;
    }
  | { kind: 'concurrent'; limit: number; lock_timeout?: number; wait_timeout?: number }
  | { kind: 'leaky'; size: number; drain: number; wait_timeout?: number }
  | { kind: 'points'; capacity: number; refill: number; wait_timeout?: number }
  | { kind: 'calendar'; limit: number; period: 'day' | 'week' | 'month' | 'year'; tz?: string; anchor?: number; wait_timeout?: number }
  | {
      kind: 'partitions';
      total_rate: number;
      partitions: number;
      lease_ttl?: number;
      reserved?: number;
      priority?: boolean;
      wait_timeout?: number;
    }
  | { kind: 'unlimited'; wait_timeout?: number }
);

/** A limiter as the registry (Redis) or this process (memory) knows it. */
export interface LimiterInfo {
  name: string;
  kind: string;
  /** The spec it was built with (the last process to register it wins). */
  spec: LimiterSpec;
  /** Live overrides: `key` null for the whole limiter. */
  overrides: Array<{ key: string | null; spec: LimiterSpec }>;
  /** Who used it: language, library version and host. */
  users: string[];
  /** Processes that used it in the last three minutes. */
  processes: number;
  firstSeenMs: number;
  lastSeenMs: number;
  /**
   * What the registry reported in the last three minutes about a use of the name it could not
   * take (another kind used by a live process: one name, one kind; or a whole-limiter override
   * of another kind), or null.
   */
  conflict: string | null;
  /** True for an override no process has used yet (`kind` and `spec` are the override's). */
  waiting: boolean;
}

/** A limiter's metrics: checks by outcome, their latency on Redis, and concurrent leases. */
export interface LimiterMetrics {
  allowed: number;
  refused: number;
  errors: number;
  failedOpen: number;
  fellBack: number;
  latencyCount: number;
  latencySumMs: number;
  /** `[upper bound in ms (null: infinite), count]` per bucket, not cumulative. */
  latencyBucketsMs: Array<[number | null, number]>;
  held: number;
  heldTimeMs: number;
  immediate: number;
  waited: number;
  waitTimeMs: number;
  overages: number;
  reclaimed: number;
  /** Pauses (`pause`, `observe`) shortened to the limiter's `maxPauseMs`. */
  pausesClamped: number;
  /** Checks refused by a block (`blockForMs` after a refusal, or `block` by hand). */
  blocked: number;
  /** Checks a limiter in shadow mode would have refused and admitted instead. */
  shadowRefused: number;
  /** Checks a Redis limiter refused from its deny cache, with no round trip. */
  refusedLocally: number;
  /** Checks refused by a pause (`pause`, `observe`) rather than by the limiter's state. */
  paused: number;
  /** Leases given back by a release (including one already reclaimed). */
  released: number;
  /** Leases this process was granted and has not released (`held - released`). */
  leasesHeld: number;
  /** Settles applied (`settle`); a repeat of one already applied is not counted. */
  settles: number;
  /** Units the applied settles charged (calls that cost more than checked). */
  settleCharged: number;
  /** Units the applied settles asked to refund (calls that cost less than checked); a kind's rule may give back less. */
  settleRefunded: number;
}

/** Options of `observe` and `observeResponse`. */
export interface ObserveOptions {
  /** The longest pause this call writes (ms; default: the limiter's `maxPauseMs`). */
  maxPauseMs?: number;
}

/**
 * Response headers as `observe` accepts them: a plain object (Node's `IncomingHttpHeaders`), a
 * fetch `Headers` or a `Map` (anything with `forEach(value, name)`), a `Response`, or
 * `[name, value]` pairs.
 */
export type ResponseHeaders =
  | Record<string, string | readonly string[] | undefined>
  | { forEach(callback: (value: string, name: string) => void): void }
  | { status: number; headers: ResponseHeaders }
  | ReadonlyArray<readonly [string, string]>;

/**
 * Where limiter state lives; every limiter built from one backend shares it, and every backend
 * for the same Redis URL in this process shares one connection set. `new Backend()` is an
 * in-process memory backend.
 */
export declare class Backend {
  /** An in-process memory backend with default settings (the same as `Backend.memory()`). */
  constructor()
  /** An in-process memory backend: per process, thread-safe, bounded. */
  static memory(options?: MemoryOptions): Backend
  /**
   * A standalone Redis server: `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS).
   * Nothing connects until the first call.
   */
  static redis(url: string, options?: RedisOptions): Backend
  /** A Redis Cluster reached through any of `seeds` (`redis://host:port` URLs). */
  static cluster(seeds: string[], options?: RedisOptions): Backend
  /**
   * A Sentinel-managed primary found through any of `sentinels` (`'host:port'`): every
   * connection asks the sentinels where the primary is and confirms its role first, so a
   * failover is followed and no call goes to a replica. Takes `Backend.redis()`'s options too
   * (`tls`: the data nodes speak TLS); `sentinelUsername`, `sentinelPassword` and `sentinelTls`
   * are the sentinels' own.
   */
  static sentinel(options: { sentinels: string[] } & SentinelOptions & RedisOptions): Backend
  /** Keys held by a memory backend (expired ones included until swept); `null` for Redis. */
  get memoryKeys(): number | null
  /** What the failure policy has done so far (all 0 for memory backends). */
  stats(): BackendStats
  /**
   * At most `limit` holders at once. `acquire` (or `check`) returns a lease to `release`; a
   * lease older than `lockTimeoutMs` may be reclaimed by a caller that needs its slot.
   * `limit = 1` is a distributed mutex.
   */
  concurrent(name: string, limit: number, options?: ConcurrentOptions): Limiter
  /**
   * `limit` per fixed window of `interval`, windows aligned to multiples of the interval since
   * the epoch: `bucket('api', 100, '1m')`, or a rate string in place of both,
   * `bucket('api', '100/minute')`. A bare number as the interval is refused (see `Duration`).
   */
  bucket(name: string, limit: number, interval: Duration, options?: LimiterOptions): Limiter
  bucket(name: string, rate: RateText, options?: LimiterOptions): Limiter
  /**
   * Exact sliding window: never more than `limit` admissions in any span of `interval`:
   * `window('api', 5, '1m')`, or a rate string in place of both, `window('api', '5/minute')`.
   */
  window(name: string, limit: number, interval: Duration, options?: LimiterOptions): Limiter
  window(name: string, rate: RateText, options?: LimiterOptions): Limiter
  /**
   * Several exact sliding windows checked and recorded together (e.g. 25 per 5 s AND 300 per
   * 60 s): `[{ limit, intervalMs }, …]` or `'25/5s; 300/minute'`; decisions carry each
   * window's state in `limits`.
   */
  windows(name: string, windows: WindowLimitOptions[] | RateText, options?: LimiterOptions): Limiter
  /**
   * Several limits in one atomic check over sub-buckets of `precisionMs` (Carlson's sliding
   * window): `[{ durationMs, limit, precisionMs? }, …]` or `[[duration, limit, precision?], …]`
   * with the tuple's durations strings with units (`['1h', 1000, '1m']`).
   */
  slidingWindow(name: string, limits: Array<SlidingLimitOptions | [Duration, number] | [Duration, number, Duration]>, options?: LimiterOptions): Limiter
  /** Refills `rate` tokens per second up to `capacity`; a call asks for `cost` tokens. */
  tokenBucket(name: string, rate: number, capacity: number, options?: LimiterOptions): Limiter
  /**
   * Leased partitions (Azure's rate limiting pattern): `totalRate` units per second split into
   * `partitions` equal partitions. On Redis each process leases a fair share of them for
   * `leaseTtlMs` (renewed while it calls) and `check`/`acquire` pace it to the rate it holds
   * (20 calls per 200 ms at 100/s, not 100 at once); a dead process's partitions return after
   * `leaseTtlMs`, and `close()` gives them back at once. On memory the process holds every
   * partition of its class.
   */
  partitions(name: string, totalRate: number, partitions: number, options?: PartitionsOptions): Limiter
  /**
   * A token bucket (`rate` per second up to `capacity`) shared by the fleet, whose tokens
   * this process takes from Redis in leases of up to `chunk` and spends in-process; unspent
   * tokens go back on `close()` or at the next lease, or lapse `leaseTtlMs` after they were
   * taken. The fleet admits at most capacity + rate × (span + lease_ttl) over any span; leasing ahead may under-use
   * it. On the memory backend: the token bucket.
   */
  leased(name: string, rate: number, capacity: number, options?: LeasedOptions): Limiter
  /** A burst of `size`, then one call per `drain / size`; full again after `drain` idle (`'1m'`). */
  leaky(name: string, size: number, drain: Duration, options?: LimiterOptions): Limiter
  /**
   * A leaky bucket of `capacity` points refilled in `refill` (`'20s'`): a call gives an
   * estimate, and `pointsUsed` (or the permit of `withinLimit`) charges or refunds the
   * difference.
   */
  points(name: string, capacity: number, refill: Duration, options?: LimiterOptions): Limiter
  /**
   * `limit` per calendar `period` (`'day'`, `'week'` from Monday, `'month'`, `'year'`) in the
   * IANA time zone `tz` (default UTC); months start on day `anchor`.
   */
  calendar(name: string, limit: number, period: 'day' | 'week' | 'month' | 'year', options?: CalendarOptions): Limiter
  /**
   * A limiter built from its spec as canonical-or-not JSON text (durations in seconds, as in
   * every language). `backend.limiter(name, spec)` takes an object or this text.
   */
  limiterFromJson(name: string, specJson: string): Limiter
  /**
   * A limiter that always allows and touches no backend (admins, tests); `limit` and
   * `remaining` are 2^53. Without a name it is `Limiter.unlimited()`.
   */
  unlimited(name?: string): Limiter
  /** Every limiter the backend knows as JSON text (`backend.limiters()` parses it). */
  limitersJson(): Promise<string>
  /** Overrides `name`'s spec (JSON text), or one key's (`backend.setLimit` takes an object). */
  setLimitJson(name: string, specJson: string, key?: string | null): Promise<void>
  /** Removes the override of `name`, or of one key of it. */
  clearLimit(name: string, key?: string | null): Promise<void>
  /** Sends this process's pending metric counts and registrations to Redis now. */
  flush(): Promise<void>
  /** Every limiter's metrics as JSON text (`backend.metrics()` parses it). */
  metricsJson(fleet?: boolean | undefined | null): Promise<string>
  /**
   * Every limiter's metrics in the Prometheus text exposition format (`fleet`: every
   * process's, read from Redis).
   */
  prometheusText(fleet?: boolean | undefined | null): Promise<string>
  /**
   * Every limiter the backend knows: on Redis the registry (any process, any language, last
   * 90 days), on memory this process's; each with its live overrides.
   */
  limiters(): Promise<LimiterInfo[]>;
  /**
   * Overrides limiter `name`'s spec, or one `key`'s, in every process using this backend
   * (each applies it within a fraction of a second, keeping its state). A bad field rejects
   * with `ERR_INVALID_ARGUMENT` naming it, before anything is written.
   */
  setLimit(name: string, spec: LimiterSpec | string, key?: string | null): Promise<void>;
  /** Removes the override of `name`, or of one `key` of it. */
  clearLimit(name: string, key?: string | null): Promise<void>;
  /** Sends this process's pending metric counts and registrations to Redis now. */
  flush(): Promise<void>;
  /** Every limiter's metrics: this process's, or with `fleet` every process's. */
  metrics(options?: { fleet?: boolean }): Promise<Array<{ name: string; kind: string; metrics: LimiterMetrics }>>;
  /** Every limiter's metrics in the Prometheus text exposition format. */
  prometheus(options?: { fleet?: boolean }): Promise<string>;
  /**
   * Starts timing this backend's calls for `durations()` (what `ratekeeper/otel` records into its
   * duration histograms). Counted: each call needs its `stopObserving()`.
   */
  /** Identifies this backend within the process (a limiter's `backendId`). */
  readonly id: number;
  startObserving(): void;
  /** Ends one `startObserving()`; the durations counted so far stay readable. */
  stopObserving(): void;
  /**
   * The durations of this process's observed calls, cumulative: `counts` per bucket of
   * `Backend.durationBounds()` (then the unbounded bucket), `sumsNs` their totals in nanoseconds.
   * Never the key.
   */
  durations(): Array<{
    name: string;
    kind: string;
    call: 'check' | 'wait';
    outcome: string;
    counts: number[];
    sumsNs: number[];
  }>;
  /** Upper bounds (seconds) of the buckets of `durations()`. */
  static durationBounds(): number[];
  /**
   * Builds a limiter from its spec as data (an object, or its JSON text). A bad field throws
   * `ERR_INVALID_ARGUMENT` whose `parameter` is the field's path (`rate`, `windows[1]`).
   */
  limiter(name: string, spec: LimiterSpec | string): Limiter;
  /**
   * Decides every part (a limiter of this backend, a key, a cost) in one atomic step at one
   * instant: all are admitted and consume their cost, or none consumes anything. Never waits.
   * On a Redis Cluster the parts' keys must share one slot (build the limiters with
   * `colocate: 'tenant'`), else `ERR_INVALID_ARGUMENT` naming `parts`. Bad parts are refused
   * naming them (`parts[1].cost`) before anything is written.
   */
  checkAll(parts: CheckAllPart[]): Promise<CombinedDecision>;
  /**
   * Like `checkAll`, waiting up to `waitTimeoutMs` (default: the shortest of the parts'
   * limiters' `waitTimeoutMs`) for a step that admits every part; then rejects with
   * `ERR_OVER_LIMIT` carrying the combination's `retryAfterMs`.
   */
  acquireAll(parts: CheckAllPart[], options?: AcquireAllOptions): Promise<CombinedDecision>;
}

/**
 * A rate limiter bound to a backend; build it with a `Backend` method. Every call takes an
 * optional `key` (any string up to 1 KiB, e.g. a user id): one limiter serves many identities.
 */
export declare class Limiter {
  /** Limiters are built by a `Backend` method (or `Limiter.unlimited()`). */
  private constructor()
  /**
   * A limiter that always allows and touches no backend (admins, tests); `limit` and
   * `remaining` are 2^53.
   */
  static unlimited(): Limiter
  /** The limiter's name. */
  get name(): string
  /** Its backend's `id` (what `ratekeeper/otel` finds the limiter's tracers by). */
  get backendId(): number
  /**
   * The limiter's spec as canonical JSON text (durations in seconds); `limiter.spec` is the
   * same parsed into an object.
   */
  get specJson(): string
  /**
   * The limiter's kind: `concurrent`, `bucket`, `window`, `sliding_window`, `token_bucket`,
   * `leaky`, `points` or `unlimited`.
   */
  get kind(): string
  /**
   * Whether the backend's `fail_open` / `fallback` policy applies to this limiter: true for
   * every limiter but concurrent ones, which fail closed unless built with
   * `allowFallback: true`.
   */
  get allowsFallback(): boolean
  /**
   * The most one call may cost (the burst, the smallest limit, the slot count; 2^53 for
   * `unlimited`): a larger cost is refused on every call.
   */
  get capacity(): number
  /** Whether a charge can be given back (`pointsUsed(key, cost, 0)`): token bucket, leaky, points. */
  get refundable(): boolean
  /**
   * The span the quota covers in milliseconds, where the kind has one window (the HTTP
   * fields' `w`); null otherwise.
   */
  get windowMs(): number | null
  /** How long `acquire` and `withinLimit` wait by default, in milliseconds. */
  get waitTimeoutMs(): number
  /** The longest pause `pause` and `observe` write, in milliseconds (default 3600000). */
  get maxPauseMs(): number
  /**
   * The same limiter (same state and metrics) whose pauses last at most `maxPause` (`'10m'`;
   * default one hour): a longer pause asked of `pause` or `observe` is shortened to it and
   * counted in `metrics().pausesClamped`. A `maxPause` that is not a positive duration up to
   * 100 years throws `ERR_INVALID_ARGUMENT` naming `maxPause`.
   */
  withMaxPause(maxPause: Duration): Limiter
  /** The same limiter (same state) with another default wait timeout (`'5s'`; `0`: never wait). */
  withWaitTimeout(waitTimeout: Duration | 0): Limiter
  /**
   * How long a refusal blocks the key, in milliseconds (`null`: a refusal blocks nothing, the
   * default; see `withBlockFor`).
   */
  get blockForMs(): number | null
  /**
   * The same limiter (same state and metrics) whose refusals block the key for `blockFor`
   * (`'15m'`; `null`: they block nothing): after a refused check, every `check`, `peek` and `acquire`
   * of this limiter and key, in every process sharing the backend, is refused with
   * `retryAfterMs` = the block's remaining time, consuming nothing; the refusal that starts
   * the block says so too. A spec carries it as `block_for` (seconds). A `blockFor` that is
   * not a positive duration up to 100 years throws `ERR_INVALID_ARGUMENT` naming `blockFor`.
   */
  withBlockFor(blockFor: Duration | null): Limiter
  /** Whether this limiter remembers refusals in process (see `withDenyCache`). */
  get denyCache(): boolean
  /**
   * The same limiter (same state and metrics) with the deny cache on or off: on, a refusal
   * with `retryAfterMs` R is remembered in this process, and until R has passed a check of the
   * same key with at least the refused cost is refused from memory, with no round trip
   * (counted in `metrics().refusedLocally`). A `reset`, an `unblock` or a live override seen by
   * this process ends the entries they affect. Only Redis limiters of the counting kinds use it.
   */
  withDenyCache(on: boolean): Limiter
  /**
   * Whether the limiter is in shadow mode (a live override of the limiter or of a key decides
   * instead, with the `shadow` of its spec).
   */
  get shadow(): boolean
  /**
   * The same limiter (same state and metrics) in shadow mode (`true`) or enforcing (`false`).
   * In shadow mode a call the limit would refuse is admitted: `allowed` and `shadowRefused` are
   * true, nothing is consumed, `remaining` and `retryAfterMs` say what enforcement would have
   * said; `acquire` never waits, `withinLimit` runs its function, a concurrent limiter grants no
   * lease to it. Counted in `metrics().shadowRefused`. A spec carries it as `shadow: true`.
   */
  withShadow(shadow: boolean): Limiter
  /**
   * Takes `cost` (default 1) for `key` if the limit allows, never waiting. A refused call
   * consumes nothing and resolves with `allowed: false` and the exact `retryAfterMs`. On a
   * concurrent limiter an admitted call holds `decision.lease`: release it.
   */
  check(key?: string | null, cost?: number): Promise<Decision>
  /**
   * `check` without a Promise: for memory backends and `unlimited` (on Redis it blocks the
   * thread for the round trip).
   */
  checkSync(key?: string | null, cost?: number): Decision
  /** What a call of cost 1 would get now, consuming nothing. */
  peek(key?: string | null): Promise<Decision>
  /** `peek` without a Promise (see `checkSync`). */
  peekSync(key?: string | null): Decision
  /**
   * Takes `cost`, waiting up to `waitTimeoutMs` (default: the limiter's) for the limit to
   * allow it: sleeping exactly until the decision can change, or until a release wakes it,
   * never polling. Rejects with `ERR_OVER_LIMIT` (and its `retryAfterMs`) at once when the
   * wait could not succeed in time.
   */
  acquire(key?: string | null, options?: AcquireOptions): Promise<Decision>
  /** Forgets all state of `key` (waiters on a concurrent limiter wake to re-check). */
  reset(key?: string | null): Promise<void>
  /**
   * Gives back what this process holds: every partition of a partitions limiter (other
   * processes may lease them at once instead of after the lease TTL), the unspent tokens of
   * a leased limiter's leases; a later call leases anew. Does nothing on other limiters.
   */
  close(): Promise<void>
  /**
   * The partitions this process holds of a partitions limiter for `key`, as
   * `[index, fencingToken]` pairs. Throws `ERR_INVALID_ARGUMENT` naming `limiter` on other
   * kinds.
   */
  partitionsHeld(key?: string | null): Array<[number, number]>
  /**
   * Gives back a lease of a concurrent limiter (its key travels in the lease). Rejects with
   * `ERR_LEASE_LOST` when it had been reclaimed (it outlived `lockTimeoutMs`) or reset.
   */
  release(lease: Lease): Promise<void>
  /**
   * Renews a lease for another `lockTimeoutMs` from now, so a long task keeps its slot.
   * Rejects with `ERR_LEASE_LOST` if it was already reclaimed.
   */
  extend(lease: Lease): Promise<void>
  /**
   * Corrects a charge of `estimate` to `actual` (points, token bucket and leaky limiters):
   * the difference is charged or refunded. An `actual` above the capacity is charged as debt
   * the bucket waits out, at most 16 capacities ahead of now. Each call applies its own
   * difference (a `withinLimit` permit reports once). Resolves with the state after the
   * correction.
   */
  pointsUsed(key: string | null | undefined, estimate: number, actual: number): Promise<Decision>
  /**
   * Settles `decision` (an admitted call of this limiter, checked with an estimated cost) to
   * its `actual` cost: the difference is charged or refunded exactly once, however often the
   * same decision is settled (a retry after a timeout is safe; a decision stored as JSON
   * settles like the original, in any process on the same backend: its ticket's JSON carries
   * a `seal`). A charge applies even past the limit (later calls wait the debt out); a refund
   * never gives back more than the call took, nor to a window that has rolled over. Resolves
   * with the state after it, as `peek` reports it. A decision that cannot be settled (refused;
   * concurrent, unlimited or partitions; another limiter's; older than the settle window, an
   * hour; a ticket from outside the process whose seal is missing or does not match it)
   * rejects with `ERR_INVALID_ARGUMENT` naming `decision`.
   */
  settle(decision: Decision, actual: number): Promise<Decision>
  /**
   * `settle` without a Promise: for memory backends (on Redis it blocks the thread for the
   * round trip).
   */
  settleSync(decision: Decision, actual: number): Decision
  /**
   * Pauses `key` for `duration` (`'30s'`), in every process sharing the backend: until it ends,
   * `check` and `peek` resolve refused with `retryAfterMs` = the remaining pause (consuming
   * nothing) and `acquire` waits it out. A pause lasts at most the limiter's `maxPauseMs` (see
   * `withMaxPause`). A longer pause extends the one in effect; a shorter one never shortens
   * it; `resume` ends it. Resolves with the pause in effect (ms). On Redis the check costs
   * no extra round trip. A `duration` that is not a positive duration with its unit rejects
   * with `ERR_INVALID_ARGUMENT` naming `duration`.
   */
  pause(duration: Duration, key?: string | null): Promise<number>
  /**
   * Ends the pause of `key` now, in every process sharing the backend (an operator's
   * override of a pause that is wrong or no longer needed); the key's other state is kept.
   * Resolves with whether a pause was in effect.
   */
  resume(key?: string | null): Promise<boolean>
  /**
   * Blocks `key` for `duration` (`'15m'`) from now, in every process sharing the backend: until it
   * ends (or `unblock`, or `reset`), `check` and `peek` resolve refused with `retryAfterMs` =
   * the block's remaining time (consuming nothing) and `acquire` waits it out. The block
   * replaces the one in effect, shorter or longer. A block is not a pause: `resume` leaves it
   * alone. Resolves with the block in effect (ms). A `duration` that is not a positive
   * duration with its unit rejects with `ERR_INVALID_ARGUMENT` naming `duration`.
   */
  block(duration: Duration, key?: string | null): Promise<number>
  /**
   * Ends the block of `key` now, in every process sharing the backend; the key's other state,
   * and a pause, are kept. Resolves with whether a block was in effect.
   */
  unblock(key?: string | null): Promise<boolean>
  /**
   * This process's metrics for this limiter: its checks by outcome (and their latency on
   * Redis); concurrent limiters add their leases.
   */
  metrics(): Metrics
  /**
   * The metrics of every process sharing this limiter (on Redis: this process's pending
   * counts are flushed first, then the sum is read back; on memory: `metrics()`).
   */
  fleetMetrics(): Promise<Metrics>
  /** The limiter's spec as data, in the canonical form every language reads back. */
  readonly spec: LimiterSpec;
  /**
   * Acquires (waiting up to the wait timeout), runs `fn`, then releases the lease (concurrent
   * limiters), even when `fn` throws. Resolves with what `fn` returns.
   */
  withinLimit<T>(fn: (permit: Permit) => T | PromiseLike<T>, options?: WithinLimitOptions & { policy?: 'raise' }): Promise<T>;
  withinLimit<T>(fn: (permit: Permit) => T | PromiseLike<T>, options: WithinLimitOptions & { policy: 'ignore' }): Promise<T | typeof SKIPPED>;
  /**
   * Reads an upstream response's `status` and `headers` and pauses `key` (see `pause`) for as
   * long as a 429 or 503 asks: `Retry-After` (seconds or HTTP-date), else `RateLimit-Reset`
   * when `RateLimit-Remaining` is 0, else `X-RateLimit-Reset`. Header names are
   * case-insensitive; malformed values are ignored. The pause lasts at most
   * `options.maxPauseMs` (default: the limiter's `maxPauseMs`, one hour unless
   * `withMaxPause` said otherwise). Resolves with the pause in effect (ms), or `null` when the
   * response asks for none.
   */
  observe(status: number, headers: ResponseHeaders, key?: string | null, options?: ObserveOptions): Promise<number | null>;
  /** `observe(response.status, response.headers, key, options)` for a fetch `Response` (or alike). */
  observeResponse(
    response: { status: number; headers: ResponseHeaders },
    key?: string | null,
    options?: ObserveOptions,
  ): Promise<number | null>;
}

/**
 * Fleet usage load shedder: at most `limit` non-critical requests in flight across every
 * process sharing the backend; critical requests bypass it.
 */
export declare class FleetShedder {
  /** A shedder named `name` allowing `limit` non-critical requests in flight at once. */
  constructor(backend: Backend, name: string, limit: number, options?: FleetShedderOptions)
  /**
   * Admits a request: a critical one always passes and holds nothing (`null`); another takes
   * a slot (a lease) or rejects with `ERR_SHED`. Give the ticket back with `leave`.
   */
  enter(critical?: boolean): Promise<Lease | null>
  /** Gives back the slot of a finished request (`null` for critical ones). */
  leave(ticket: Lease | null): Promise<void>
  /** `enter`, run `fn`, `leave` (even when `fn` throws). Rejects with `ERR_SHED` when shed. */
  run<T>(fn: () => T | PromiseLike<T>, options?: { critical?: boolean }): Promise<T>;
}

/** The stable `code` of every error ratekeeper throws or rejects with. */
export type ErrorCode =
  | 'ERR_OVER_LIMIT'
  | 'ERR_SHED'
  | 'ERR_LEASE_LOST'
  | 'ERR_INVALID_ARGUMENT'
  | 'ERR_BACKEND_UNAVAILABLE'
  | 'ERR_TIMEOUT'
  | 'ERR_BACKEND_REJECTED'
  | 'ERR_RATEKEEPER'
  | 'ERR_INTERNAL';

/** Every error code, by name. */
export declare const codes: Readonly<{
  OVER_LIMIT: 'ERR_OVER_LIMIT';
  SHED: 'ERR_SHED';
  LEASE_LOST: 'ERR_LEASE_LOST';
  INVALID_ARGUMENT: 'ERR_INVALID_ARGUMENT';
  BACKEND_UNAVAILABLE: 'ERR_BACKEND_UNAVAILABLE';
  TIMEOUT: 'ERR_TIMEOUT';
  BACKEND_REJECTED: 'ERR_BACKEND_REJECTED';
  RATEKEEPER: 'ERR_RATEKEEPER';
  INTERNAL: 'ERR_INTERNAL';
}>;

/** An error from ratekeeper: an `Error` with a stable `code`. */
export interface RatekeeperError extends Error {
  code: ErrorCode;
  /** `ERR_OVER_LIMIT`: milliseconds until the refused call could succeed. */
  retryAfterMs?: number;
  /** `ERR_INVALID_ARGUMENT`: the offending parameter's (JavaScript) name. */
  parameter?: string;
  /** `ERR_BACKEND_REJECTED`: the Redis error code (`NOPERM`, `WRONGPASS`, `OOM`, ...). */
  redisCode?: string;
}

/** Whether `error` came from ratekeeper. */
export declare function isRatekeeperError(error: unknown): error is RatekeeperError;

/** Milliseconds as whole seconds, rounded up. */
export declare function ceilSeconds(ms: number): number;

/** Which header fields `rateLimitHeaders` writes, and the draft-11 policy's name. */
export interface RateLimitHeadersOptions {
  /** `'draft-11'` (default, as the HTTP middleware), `'draft-7'`, `'draft-6'` or `'legacy'`. */
  form?: 'draft-11' | 'draft-7' | 'draft-6' | 'legacy';
  /** The draft-11 policy item's name (default `'default'`; the middleware uses the limiter's name). */
  policy?: string;
}

/**
 * The response headers for a decision, draft-11 by default as the HTTP middleware writes them
 * (`RateLimit-Policy: "default";q=5`, `RateLimit: "default";r=0;t=10`), or another `form`; when
 * refused, `Retry-After`. Times are whole seconds, rounded up.
 */
export declare function rateLimitHeaders(decision: Decision, options?: RateLimitHeadersOptions): Record<string, string>;

/** `Retry-After` for an `ERR_OVER_LIMIT` error (`{}` for any other error). */
export declare function retryAfterHeaders(error: unknown): Record<string, string>;

/** 429 for a refused decision or `ERR_OVER_LIMIT`, 503 for `ERR_SHED`, otherwise `undefined`. */
export declare function httpStatus(decisionOrError: Decision | unknown): 429 | 503 | undefined;

/** Sets the headers of `rateLimitHeaders(decision, options)` on a Node/Express response. */
export declare function setRateLimitHeaders(
  response: { setHeader(name: string, value: string): unknown },
  decision: Decision,
  options?: RateLimitHeadersOptions,
): void;
