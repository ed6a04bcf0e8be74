// ESM entry point: the same module as index.js (`import { Backend } from 'ratekeeper'`).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const ratekeeper = require('./index.js');

export const {
  Backend,
  Limiter,
  Backoff,
  ManualClock,
  FleetShedder,
  UtilizationShedder,
  coreVersion,
  SKIPPED,
  codes,
  isRatekeeperError,
  ceilSeconds,
  rateLimitHeaders,
  retryAfterHeaders,
  httpStatus,
  setRateLimitHeaders,
} = ratekeeper;
export default ratekeeper;
