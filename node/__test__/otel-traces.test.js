'use strict';
// ratekeeper/otel's traces through the OpenTelemetry SDK's in-memory span exporter, on a real
// redis-server and on memory: with a tracer provider, one span per check/checkSync/acquire in the
// caller's active span, carrying the decision and never the key; without one (or with
// `traces: false`), no span. Node's Redis round trips have no span of their own (see the
// Observability page).

const test = require('node:test');
const assert = require('node:assert/strict');
const { context } = require('@opentelemetry/api');
const { MeterProvider } = require('@opentelemetry/sdk-metrics');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { Backend, codes } = require('../index.js');
const otel = require('../otel.js');
const { RedisServer } = require('./support/redis.js');

const KEY = 'user-4711@example.com';

function tracing(t) {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  t.after(async () => {
    context.disable();
    await provider.shutdown();
  });
  return { provider, exporter };
}

/** Inside a caller's span `request`: 2 admitted checks and 1 refused of `api` (capacity 2, one of
 * them checkSync), then an acquire refused within its wait (waitTimeoutMs 0). */
async function scripted(backend, provider) {
  const api = backend.tokenBucket('api', 0.001, 2);
  await provider.getTracer('app').startActiveSpan('request', async (span) => {
    assert.equal((await api.check(KEY)).allowed, true);
    assert.equal(api.checkSync(KEY).allowed, true);
    assert.equal((await api.check(KEY)).allowed, false);
    await assert.rejects(api.acquire(KEY, { waitTimeoutMs: 0 }), (e) => e.code === codes.OVER_LIMIT);
    span.end();
  });
}

for (const [where, make] of [
  ['redis', (server) => Backend.redis(server.url, { prefix: `oteltr${process.pid}` })],
  ['memory', () => Backend.memory()],
]) {
  test(`otel traces: a span per call in the caller's span, with the decision and no key (${where})`, async (t) => {
    const server = where === 'redis' ? await RedisServer.start() : null;
    if (server) t.after(() => server.stop());
    const { provider, exporter } = tracing(t);
    const backend = make(server);
    const handle = otel.instrument(backend, { meterProvider: new MeterProvider(), tracerProvider: provider });
    await scripted(backend, provider);
    const spans = exporter.getFinishedSpans();
    for (const span of spans) {
      for (const value of Object.values(span.attributes)) assert.ok(!String(value).includes(KEY), `${span.name}`);
    }
    assert.equal(spans.length, 5, spans.map((s) => s.name).join());
    const request = spans.find((s) => s.name === 'request');
    const calls = spans.filter((s) => s.name !== 'request');
    assert.deepEqual(calls.map((s) => s.name), ['ratekeeper check', 'ratekeeper check', 'ratekeeper check', 'ratekeeper acquire']);
    assert.deepEqual(calls.map((s) => s.attributes['ratekeeper.outcome']), ['admitted', 'admitted', 'refused', 'refused']);
    for (const call of calls) {
      assert.equal(call.parentSpanContext.spanId, request.spanContext().spanId);
      assert.equal(call.spanContext().traceId, request.spanContext().traceId);
      assert.equal(call.attributes['ratekeeper.limiter'], 'api');
      assert.equal(call.attributes['ratekeeper.kind'], 'token_bucket');
      assert.equal(call.attributes['ratekeeper.retry_after'] > 0, call.attributes['ratekeeper.outcome'] === 'refused');
    }
    // Closed: no more spans.
    handle.close();
    exporter.reset();
    await backend.tokenBucket('api', 0.001, 2).check(KEY);
    assert.equal(exporter.getFinishedSpans().length, 0);
  });
}

for (const where of ['redis', 'memory']) {
  test(`otel traces: peek, settle, release, checkAll and acquireAll make a span each (${where})`, async (t) => {
    const server = where === 'redis' ? await RedisServer.start() : null;
    if (server) t.after(() => server.stop());
    const { provider, exporter } = tracing(t);
    const backend = server ? Backend.redis(server.url, { prefix: `otelother${process.pid}` }) : Backend.memory();
    const handle = otel.instrument(backend, { meterProvider: new MeterProvider(), tracerProvider: provider });
    t.after(() => handle.close());
    const api = backend.tokenBucket('api', 0.001, 10);
    const pool = backend.concurrent('pool', 1, { lockTimeoutMs: 30_000 });
    const first = await api.check(KEY, 3);
    const second = api.checkSync(KEY, 1);
    exporter.reset();
    await api.peek(KEY);
    api.peekSync(KEY);
    await api.settle(first, 1);
    api.settleSync(second, 4);
    const combined = await backend.checkAll([
      { limiter: api, key: KEY, cost: 1 },
      { limiter: pool, key: KEY, cost: 1 },
    ]);
    assert.equal(combined.allowed, true);
    await assert.rejects(
      backend.acquireAll([{ limiter: pool, key: KEY }], { waitTimeoutMs: 0 }),
      (e) => e.code === codes.OVER_LIMIT,
    );
    await pool.release(combined.parts[1].decision.lease);
    const spans = exporter.getFinishedSpans();
    for (const span of spans) {
      assert.equal(span.kind === undefined ? 0 : span.kind, 0, `${span.name} is internal`);
      for (const value of Object.values(span.attributes)) assert.ok(!String(value).includes(KEY), `${span.name}`);
    }
    assert.deepEqual(
      spans.map((s) => [s.name, s.attributes['ratekeeper.outcome']]),
      [
        ['ratekeeper peek', 'admitted'],
        ['ratekeeper peek', 'admitted'],
        ['ratekeeper settle', 'admitted'],
        ['ratekeeper settle', 'admitted'],
        ['ratekeeper check_all', 'admitted'],
        ['ratekeeper acquire_all', 'refused'],
        ['ratekeeper release', undefined],
      ],
    );
    const [, , refund, charge, all, acquireAll, release] = spans;
    assert.deepEqual([refund.attributes['ratekeeper.direction'], refund.attributes['ratekeeper.units']], ['refunded', 2]);
    assert.deepEqual([charge.attributes['ratekeeper.direction'], charge.attributes['ratekeeper.units']], ['charged', 3]);
    assert.equal(refund.attributes['ratekeeper.limiter'], 'api');
    assert.deepEqual(all.attributes['ratekeeper.limiters'], ['api', 'pool']);
    assert.equal(all.attributes['ratekeeper.retry_after'], 0);
    assert.deepEqual(acquireAll.attributes['ratekeeper.limiters'], ['pool']);
    assert.ok(acquireAll.attributes['ratekeeper.retry_after'] > 0);
    assert.deepEqual([release.attributes['ratekeeper.limiter'], release.attributes['ratekeeper.kind']], ['pool', 'concurrent']);
  });
}

for (const traces of [undefined, false]) {
  test(`otel traces: none without a tracer provider, or with traces: false (traces: ${traces})`, async (t) => {
    const server = await RedisServer.start();
    t.after(() => server.stop());
    const { provider, exporter } = tracing(t);
    const backend = Backend.redis(server.url, { prefix: `oteltr${process.pid}` });
    const options = { meterProvider: new MeterProvider(), ...(traces === false ? { tracerProvider: provider, traces } : {}) };
    const handle = otel.instrument(backend, options);
    t.after(() => handle.close());
    await scripted(backend, provider);
    assert.deepEqual(exporter.getFinishedSpans().map((s) => s.name), ['request']);
  });
}

test('otel traces: a backend not traced makes no span while another is traced', async (t) => {
  const { provider, exporter } = tracing(t);
  const traced = Backend.memory();
  const handle = otel.instrument(traced, { meterProvider: new MeterProvider(), tracerProvider: provider });
  t.after(() => handle.close());
  const other = Backend.memory();
  await scripted(other, provider);
  assert.deepEqual(exporter.getFinishedSpans().map((s) => s.name), ['request']);
  exporter.reset();
  await traced.tokenBucket('api', 0.001, 2).check(KEY);
  assert.deepEqual(exporter.getFinishedSpans().map((s) => s.name), ['ratekeeper check']);
});

test('otel traces: `traces` must be a boolean', () => {
  assert.throws(() => otel.instrument(Backend.memory(), { traces: 'yes' }), (e) => e.parameter === 'traces');
});
