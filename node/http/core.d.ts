// Types shared by ratekeeper's HTTP adapters (ratekeeper/express, /fastify, /hono, /nestjs).

import type { FleetShedder, Limiter } from '../index';

/** The RateLimit header field forms: draft-11 (default), draft-7, draft-6, legacy `X-RateLimit-*`. */
export type HeaderForm = 'draft-11' | 'draft-7' | 'draft-6' | 'legacy';

/** The `proxyHeader` values. */
export type ProxyHeader = 'X-Forwarded-For' | 'Forwarded';

/** An RFC 9457 problem body, as the default refusal sends it (`application/problem+json`). */
export interface ProblemDetails {
  /** `https://iana.org/assignments/http-problem-types#quota-exceeded` (429), `#temporary-reduced-capacity` (503, shed), or `about:blank` (503, backend unavailable). */
  type: string;
  title: string;
  status: number;
  detail: string;
  /** The policies (limiter names) that refused the request. */
  'violated-policies'?: string[];
}

/** What a `handler` is told about a refused request. */
export interface RefusalInfo {
  /** 429 over a limit; 503 shed or backend unavailable (failed closed). */
  status: 429 | 503;
  reason: 'limited' | 'shed' | 'unavailable';
  /** The `Retry-After` already set on the response: whole seconds, rounded up. */
  retryAfterSeconds: number;
  /** The names of the limiters that refused. */
  violatedPolicies: string[];
  /** The body the default refusal would send. */
  problem: ProblemDetails;
  /** The request's rate-limiting key. */
  key: string;
}

/**
 * Options of every adapter (the same meaning in Python's middleware). `Req` is the framework's
 * request (Hono: the `Context`); `Handler` the framework's refusal handler.
 */
export interface RateLimitOptions<Req, Handler> {
  /**
   * One limiter, or several checked in order: a request passes only when all pass, and a
   * refused request gives back what the earlier ones took where they can (token bucket,
   * leaky, points; concurrent leases, shedder slots). A FleetShedder's refusal answers 503.
   */
  limiter: Limiter | FleetShedder | ReadonlyArray<Limiter | FleetShedder>;
  /** The request's key (default: the client address, IPv6 grouped by /56). */
  keyGenerator?: (request: Req) => string | Promise<string>;
  /** Units a request takes (default 1): a whole number >= 1 (within every limiter's capacity) or a function of the request. */
  cost?: number | ((request: Req) => number | Promise<number>);
  /** Exempts a request: nothing is checked, no field is sent. */
  skip?: (request: Req) => boolean | Promise<boolean>;
  /**
   * Which responses count (decided after the response): `'all'` (default), `'failures'` (a
   * successful response gives its units back: a login route) or `'successes'`. Token bucket,
   * leaky and points limiters are charged before the handler and refunded after a response that
   * does not count; other kinds are peeked before and charged after a response that counts.
   * Concurrent limiters and FleetShedders count requests in flight: `'all'` only.
   */
  count?: 'all' | 'failures' | 'successes';
  /** What counts as a success for `count` (default: status < 400). */
  requestWasSuccessful?: (status: number) => boolean;
  /** The RateLimit header field form (default `'draft-11'`); false sends none (Retry-After still goes on refusals). */
  standardHeaders?: HeaderForm | false;
  /** Answers a refused request instead of the default problem+json body. */
  handler?: Handler;
  /** Decide and send the fields, but never refuse; would-be refusals are counted (`shadowRefused`, the limiter's `refused` metric). */
  shadow?: boolean;
  /**
   * Proxies whose `proxyHeader` is believed: IP addresses or CIDR ranges. Default none: the
   * peer address is the client.
   */
  trustedProxies?: ReadonlyArray<string>;
  /**
   * The one header your trusted proxies write the client's address into, and the only one read
   * (matched without regard to case): `'X-Forwarded-For'` (default: nginx, AWS ALB, HAProxy's
   * `option forwardfor`, Cloudflare) or `'Forwarded'` (RFC 7239). The client is the right-most
   * address of it that is not a trusted proxy. Never name a header your proxy passes through
   * from the client unchanged: the client would choose its own key.
   */
  proxyHeader?: ProxyHeader;
  /**
   * Adds draft-11's `pk` (partition key) to each `RateLimit` member: the first 16 bytes of
   * HMAC-SHA256 of the request's key under this secret, base64 — a keyed hash, so the client
   * never sees its key (an IP address, a user id). At least 16 bytes; `standardHeaders`
   * `'draft-11'` only. Default: no `pk`.
   */
  partitionKeySecret?: string | Uint8Array;
}
