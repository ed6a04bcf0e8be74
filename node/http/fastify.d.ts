// ratekeeper/fastify: a Fastify plugin over ratekeeper limiters, global and per route.

import type { FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import type { RateLimitOptions, RefusalInfo } from './core';

export type { HeaderForm, ProblemDetails, ProxyHeader, RateLimitOptions, RefusalInfo } from './core';

/** The options of one route's limit (`config.rateLimit`), or of the plugin. */
export type FastifyRateLimitOptions = RateLimitOptions<FastifyRequest, (request: FastifyRequest, reply: FastifyReply, info: RefusalInfo) => unknown>;

/** The plugin's options: the route options (the defaults of every route) plus `global`. */
export type FastifyRateLimitPluginOptions = Partial<FastifyRateLimitOptions> & {
  /** Limit every route registered after the plugin (default true); false: only routes with `config.rateLimit`. */
  global?: boolean;
};

declare module 'fastify' {
  interface FastifyContextConfig {
    /** This route's limit (over the plugin's options), or false to exempt it. */
    rateLimit?: Partial<FastifyRateLimitOptions> | false;
  }
}

/** The plugin: `app.register(fastifyRateLimit, { limiter })`. */
declare const fastifyRateLimit: FastifyPluginCallback<FastifyRateLimitPluginOptions>;
export default fastifyRateLimit;
export { fastifyRateLimit };
