import type { MeterProvider, TracerProvider } from '@opentelemetry/api';
import type { Backend, Decision, Limiter } from './index';

/** `ratekeeper.outcome` values and how each is read from a limiter's metrics. */
export declare const OUTCOMES: ReadonlyArray<readonly [string, (metrics: Record<string, number>) => number]>;

/**
 * Reports `backend`'s metrics (this process's) through the OpenTelemetry API on the `ratekeeper`
 * meter of `meterProvider` (the global meter provider unless given): observable counters read at
 * each collection, never the limited key as an attribute. Traces are off unless a
 * `tracerProvider` is given or `traces: true` (the global tracer provider then); `traces: false`
 * keeps them off. Traced, each `check`/`checkSync`/`acquire` makes a span in the active context.
 * `close()` stops reporting and tracing the backend.
 */
export declare function instrument(
  backend: Backend,
  options?: { meterProvider?: MeterProvider; tracerProvider?: TracerProvider; traces?: boolean },
): { close(): void };

/** A decision's `ratekeeper.outcome`: `admitted`, `refused` or `shadow_refused`. */
export declare function outcomeOf(decision: Decision): 'admitted' | 'refused' | 'shadow_refused';

/**
 * Adds a `ratekeeper.decision` event (limiter, kind, outcome, retry_after in seconds) to the
 * active span when one is recording. Never the key.
 */
export declare function annotate(limiter: Limiter, decision: Decision): void;
