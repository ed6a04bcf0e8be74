// Compiled (never run) by types.test.js: ratekeeper/otel's typings against @opentelemetry/api's.
import { metrics } from '@opentelemetry/api';
import { Backend } from '../../index';
import { annotate, instrument, outcomeOf } from '../../otel';

export async function otelUsage(): Promise<string> {
  const backend = Backend.memory();
  const handle = instrument(backend, { meterProvider: metrics.getMeterProvider() });
  instrument(backend);
  const limiter = backend.tokenBucket('api', 10, 10);
  const decision = await limiter.check('k');
  annotate(limiter, decision);
  handle.close();
  // @ts-expect-error the meter provider is an OpenTelemetry MeterProvider
  instrument(backend, { meterProvider: 3 });
  return outcomeOf(decision);
}
