// ratekeeper/nestjs: a guard and decorators over ratekeeper limiters.

import type { CanActivate, CustomDecorator, ExecutionContext } from '@nestjs/common';
import { HttpException } from '@nestjs/common';
import type { RateLimitOptions, RefusalInfo } from './core';

export type { HeaderForm, ProblemDetails, ProxyHeader, RateLimitOptions, RefusalInfo } from './core';

/** The options; the request functions receive the platform's request. */
export type NestRateLimitOptions = RateLimitOptions<any, (request: any, response: any, info: RefusalInfo) => unknown>;

/** Limits a route or a controller with `options` (validated when the class is defined). */
export declare function RateLimit(options: NestRateLimitOptions): CustomDecorator<symbol>;

/** Exempts a route or a controller. */
export declare function SkipRateLimit(): CustomDecorator<symbol>;

/** The refusal the guard throws: the problem body with status 429 or 503. */
export declare class RateLimitException extends HttpException {
  constructor(info: RefusalInfo);
  readonly info: RefusalInfo;
}

/**
 * The guard: `new RateLimitGuard(options)` limits every route (e.g. `app.useGlobalGuards`);
 * `@UseGuards(RateLimitGuard)` limits the routes that carry `@RateLimit(...)`.
 */
export declare class RateLimitGuard implements CanActivate {
  constructor(options?: NestRateLimitOptions);
  canActivate(context: ExecutionContext): Promise<boolean>;
}

export declare const RATE_LIMIT: unique symbol;
export declare const SKIP_RATE_LIMIT: unique symbol;
