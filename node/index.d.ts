// Types of the `ratekeeper` package. The classes and result shapes are generated from the Rust
// sources (native.d.ts, regenerated and checked by scripts/test-node); this file adds what
// index.js and http.js define in JavaScript.

import type { Decision } from './native';

export * from './native';

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

/** A limiter spec as data: the same JSON in every language, durations in seconds. */
export type LimiterSpec =
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
  | { kind: 'unlimited'; wait_timeout?: number };

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
  /** Checks a limiter in shadow mode would have refused and admitted instead. */
  shadowRefused: number;
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

declare module './native' {
  interface Backend {
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
     * Builds a limiter from its spec as data (an object, or its JSON text). A bad field throws
     * `ERR_INVALID_ARGUMENT` whose `parameter` is the field's path (`rate`, `windows[1]`).
     */
    limiter(name: string, spec: LimiterSpec | string): Limiter;
  }
  interface Limiter {
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
  interface FleetShedder {
    /** `enter`, run `fn`, `leave` (even when `fn` throws). Rejects with `ERR_SHED` when shed. */
    run<T>(fn: () => T | PromiseLike<T>, options?: { critical?: boolean }): Promise<T>;
  }
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

/**
 * The response headers for a decision: `RateLimit-Limit`, `RateLimit-Remaining`,
 * `RateLimit-Reset` (seconds, rounded up) and, when refused, `Retry-After` (seconds, rounded up).
 */
export declare function rateLimitHeaders(decision: Decision): Record<string, string>;

/** `Retry-After` for an `ERR_OVER_LIMIT` error (`{}` for any other error). */
export declare function retryAfterHeaders(error: unknown): Record<string, string>;

/** 429 for a refused decision or `ERR_OVER_LIMIT`, 503 for `ERR_SHED`, otherwise `undefined`. */
export declare function httpStatus(decisionOrError: Decision | unknown): 429 | 503 | undefined;

/** Sets the headers of `rateLimitHeaders(decision)` on a Node/Express response. */
export declare function setRateLimitHeaders(
  response: { setHeader(name: string, value: string): unknown },
  decision: Decision,
): void;
