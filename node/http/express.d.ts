// ratekeeper/express: an Express (Connect, node:http) middleware over ratekeeper limiters.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RateLimitOptions, RefusalInfo } from './core';

export type { HeaderForm, ProblemDetails, ProxyHeader, RateLimitOptions, RefusalInfo } from './core';

/** A refusal handler: answers the response (headers and Retry-After are already set). */
export type ExpressRefusalHandler<Req, Res> = (request: Req, response: Res, next: (error?: unknown) => void, info: RefusalInfo) => unknown;

/** The middleware `rateLimit` returns. */
export interface RateLimitMiddleware<Req, Res> {
  (request: Req, response: Res, next: (error?: unknown) => void): Promise<void>;
  /** Requests shadow mode let through although a limit refused them. */
  readonly shadowRefused: number;
}

/**
 * A middleware that checks every request against `options.limiter`, sets the RateLimit header
 * fields and answers a refused request (429 problem+json; 503 when shed or when the backend
 * failed closed). Throws `ERR_INVALID_ARGUMENT` naming a bad option.
 */
export declare function rateLimit<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  options: RateLimitOptions<Req, ExpressRefusalHandler<Req, Res>>,
): RateLimitMiddleware<Req, Res>;
