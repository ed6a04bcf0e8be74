import type { Backend } from './index';

/** Anything with prom-client's `Registry` methods that `register` uses. */
export interface PromRegistry {
  registerMetric(metric: unknown): void;
  removeSingleMetric(name: string): void;
}

/**
 * Registers ratekeeper's metrics of `backend` with `registry` (prom-client's default registry
 * unless given), so an application's existing `/metrics` serves them: this process's, or with
 * `{ fleet: true }` every process's (read from Redis).
 */
export declare function register(
  backend: Backend,
  registry?: PromRegistry,
  options?: { fleet?: boolean },
): Promise<{ unregister(): void }>;
