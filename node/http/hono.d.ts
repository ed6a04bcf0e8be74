// ratekeeper/hono: a Hono middleware over ratekeeper limiters.

import type { Context, MiddlewareHandler } from 'hono';
import type { RateLimitOptions, RefusalInfo } from './core';

export type { HeaderForm, ProblemDetails, ProxyHeader, RateLimitOptions, RefusalInfo } from './core';

/** The options; the request functions receive Hono's `Context`. */
export type HonoRateLimitOptions = RateLimitOptions<Context, (c: Context, info: RefusalInfo) => Response | Promise<Response>>;

/** The middleware `rateLimiter` returns. */
export type RateLimiterMiddleware = MiddlewareHandler & {
  /** Requests shadow mode let through although a limit refused them. */
  readonly shadowRefused: number;
};

/**
 * A middleware that checks every request against `options.limiter`, sets the RateLimit header
 * fields and answers a refused request (429 problem+json; 503 when shed or when the backend
 * failed closed). The default key needs @hono/node-server; elsewhere give a `keyGenerator`.
 */
export declare function rateLimiter(options: HonoRateLimitOptions): RateLimiterMiddleware;
