'use strict';
// ratekeeper/otel through the OpenTelemetry SDK's in-memory metric exporter and span exporter:
// exact counts for one scripted sequence of decisions on memory and on a real redis-server, the
// limited key in no attribute, and a decision event on the active span. The region `setup` of this
// file (node/__test__/otel.test.js) is the example of docs/src/operating/observability.md.

const test = require('node:test');
const assert = require('node:assert/strict');
const { context, trace } = require('@opentelemetry/api');
const {
  MeterProvider,
  PeriodicExportingMetricReader,
  InMemoryMetricExporter,
  AggregationTemporality,
} = require('@opentelemetry/sdk-metrics');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { Backend, codes } = require('../index.js');
const otel = require('../otel.js');
const { RedisServer, freePort } = require('./support/redis.js');

const KEY = 'user-4711@example.com';

/** A meter provider whose reader collects on demand into an in-memory exporter. */
function meterProvider() {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // The interval is never reached: `collect` forces each export.
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const provider = new MeterProvider({ readers: [reader] });
  return {
    provider,
    /** The points of the latest collection as [instrument, attributes, value]. */
    async points() {
      exporter.reset();
      await reader.forceFlush();
      const out = [];
      for (const resourceMetrics of exporter.getMetrics()) {
        for (const scope of resourceMetrics.scopeMetrics) {
          assert.equal(scope.scope.name, 'ratekeeper');
          for (const metric of scope.metrics) {
            for (const p of metric.dataPoints) {
              // A histogram's value here: its count (checked against its buckets).
              if (typeof p.value === 'object') {
                assert.equal(p.value.buckets.counts.reduce((a, b) => a + b, 0), p.value.count);
                assert.ok(p.value.sum > 0, `${metric.descriptor.name} has a sum`);
                out.push([metric.descriptor.name, p.attributes, p.value.count]);
              } else {
                out.push([metric.descriptor.name, p.attributes, p.value]);
              }
            }
          }
        }
      }
      return out;
    },
    shutdown: () => provider.shutdown(),
  };
}

/** The points with a value by "instrument limiter third-attribute"; each checked for the key. */
async function counted(meter) {
  const out = {};
  for (const [name, attributes, value] of await meter.points()) {
    for (const v of Object.values(attributes)) assert.ok(!String(v).includes(KEY), `the key is an attribute of ${name}`);
    const [third] = Object.entries(attributes).filter(([k]) => k !== 'ratekeeper.limiter' && k !== 'ratekeeper.kind');
    if (value || name !== 'ratekeeper.decisions') out[`${name} ${attributes['ratekeeper.limiter']} ${third ? third[1] : ''}`] = value;
  }
  return out;
}

/** The scripted decisions (the same as the Python test's). Returns the limiters (metrics are those of live limiters). */
async function script(backend) {
  const api = backend.tokenBucket('api', 0.001, 5);
  const first = await api.check(KEY, 3);
  for (let i = 0; i < 2; i++) await api.check(KEY);
  for (let i = 0; i < 2; i++) assert.equal((await api.check(KEY)).allowed, false);
  await api.settle(first, 1);
  const dry = backend.tokenBucket('dry', 0.001, 1).withShadow(true);
  for (let i = 0; i < 3; i++) assert.equal((await dry.check(KEY)).allowed, true);
  const blocky = backend.tokenBucket('blocky', 0.001, 10);
  // Long in any unit: the test ends well before.
  await blocky.block('1m', KEY);
  assert.equal((await blocky.check(KEY)).allowed, false);
  await assert.rejects(blocky.acquire(KEY, { waitTimeoutMs: 0 }), (e) => e.code === codes.OVER_LIMIT);
  const quiet = backend.tokenBucket('quiet', 0.001, 10);
  await quiet.pause('1m', KEY);
  assert.equal((await quiet.check(KEY)).allowed, false);
  const pool = backend.concurrent('pool', 2);
  const leases = [await pool.check(KEY), await pool.check(KEY)];
  assert.equal((await pool.check(KEY)).allowed, false);
  await pool.release(leases[0].lease);
  await pool.acquire(KEY, { waitTimeoutMs: 5000 });
  return [api, dry, blocky, quiet, pool];
}

const DECISIONS = {
  'api admitted': 3,
  'api refused': 2,
  'dry admitted': 1,
  'dry shadow_refused': 2,
  'blocky refused': 2,
  'quiet refused': 1,
  'pool admitted': 3,
  'pool refused': 1,
};

// What the script counts; each check's duration is in ratekeeper.check.duration under its outcome
// (as many as its decisions), each acquire's in ratekeeper.wait.duration.
const EXPECTED = {
  ...Object.fromEntries(Object.entries(DECISIONS).map(([series, n]) => [`ratekeeper.decisions ${series}`, n])),
  ...Object.fromEntries(Object.entries(DECISIONS).map(([series, n]) => [`ratekeeper.check.duration ${series}`, n])),
  'ratekeeper.holds blocky block': 2,
  'ratekeeper.holds blocky pause': 0,
  'ratekeeper.holds quiet block': 0,
  'ratekeeper.holds quiet pause': 1,
  'ratekeeper.settle.units api refunded': 2,
  'ratekeeper.settle.units api charged': 0,
  'ratekeeper.leases.granted pool immediate': 3,
  'ratekeeper.leases.granted pool waited': 0,
  'ratekeeper.leases.held pool ': 2,
  'ratekeeper.wait.duration blocky refused': 1,
  'ratekeeper.wait.duration pool admitted': 1,
};

async function checkSequence(backend) {
  const meter = meterProvider();
  try {
    otel.instrument(backend, { meterProvider: meter.provider });
    const limiters = await script(backend);
    assert.deepEqual(await counted(meter), EXPECTED);
    const points = await meter.points();
    const kinds = Object.fromEntries(
      points.filter(([n]) => n === 'ratekeeper.decisions').map(([, a]) => [a['ratekeeper.limiter'], a['ratekeeper.kind']]),
    );
    assert.deepEqual(kinds, {
      api: 'token_bucket',
      dry: 'token_bucket',
      blocky: 'token_bucket',
      quiet: 'token_bucket',
      pool: 'concurrent',
    });
    const outcomes = new Set(points.filter(([n]) => n === 'ratekeeper.decisions').map(([, a]) => a['ratekeeper.outcome']));
    assert.deepEqual(outcomes, new Set(otel.OUTCOMES.map(([o]) => o)), 'every outcome of every limiter, zeros too');
    await limiters[0].check(KEY);
    const got = await counted(meter);
    assert.equal(got['ratekeeper.decisions api admitted'], 4, 'cumulative; the settle gave 2 back');
    assert.equal(got['ratekeeper.check.duration api admitted'], 4, 'recorded once');
  } finally {
    await meter.shutdown();
  }
}

test('otel: a scripted sequence is counted exactly on memory', async () => {
  await checkSequence(Backend.memory());
});

test('otel: a scripted sequence is counted exactly on redis', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.stop());
  await checkSequence(Backend.redis(server.url, { prefix: `otel${process.pid}` }));
});

test('otel: failed_open and fallback are outcomes; two backends share one provider; close stops', async () => {
  const down = `redis://127.0.0.1:${await freePort()}`;
  const meter = meterProvider();
  try {
    const open = Backend.redis(down, { failurePolicy: 'fail_open' });
    const fallback = Backend.redis(down, { failurePolicy: { fallback: 2 } });
    const handle = otel.instrument(open, { meterProvider: meter.provider });
    otel.instrument(fallback, { meterProvider: meter.provider });
    const a = open.tokenBucket('a', 1, 1);
    const b = fallback.tokenBucket('b', 1, 1);
    assert.equal((await a.check(KEY)).allowed, true);
    await b.check(KEY);
    const got = await counted(meter);
    assert.equal(got['ratekeeper.decisions a failed_open'], 1);
    assert.equal(got['ratekeeper.decisions b fallback'], 1);
    handle.close();
    await a.check(KEY);
    const after = await counted(meter);
    // Closed: the backend is no longer read (the SDK may keep exporting the last value it saw).
    assert.notEqual(after['ratekeeper.decisions a failed_open'], 2, 'closed: not read');
    assert.equal(after['ratekeeper.decisions b fallback'], 1);
  } finally {
    await meter.shutdown();
  }
});

test('otel: bad options are typed errors naming the parameter', () => {
  const backend = Backend.memory();
  assert.throws(() => otel.instrument(backend, { meterprovider: {} }), (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === 'meterprovider');
  assert.throws(() => otel.instrument(backend, 3), (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === 'options');
  assert.throws(() => otel.instrument({}, {}), (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === 'backend');
  assert.throws(() => otel.instrument(backend, { meterProvider: 3 }), (e) => e.code === codes.INVALID_ARGUMENT && e.parameter === 'meterProvider');
  otel.instrument(backend).close(); // the global provider (a no-op one here)
});

test('otel: annotate adds the decision to the active span, and nothing without one', async () => {
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  try {
    const limiter = Backend.memory().tokenBucket('api', 0.001, 1);
    for (const outcome of ['admitted', 'refused']) {
      await provider.getTracer('test').startActiveSpan('request', async (span) => {
        otel.annotate(limiter, await limiter.check(KEY));
        span.end();
      });
      const [span] = exporter.getFinishedSpans();
      exporter.reset();
      const [event] = span.events;
      assert.equal(event.name, 'ratekeeper.decision');
      assert.deepEqual(
        { ...event.attributes, 'ratekeeper.retry_after': event.attributes['ratekeeper.retry_after'] > 0 },
        {
          'ratekeeper.limiter': 'api',
          'ratekeeper.kind': 'token_bucket',
          'ratekeeper.outcome': outcome,
          'ratekeeper.retry_after': outcome === 'refused',
        },
      );
    }
    otel.annotate(limiter, await limiter.check(KEY));
    assert.equal(exporter.getFinishedSpans().length, 0);
    assert.equal(trace.getActiveSpan(), undefined);
  } finally {
    context.disable();
    await provider.shutdown();
  }
});

test('otel: the express middleware puts each decision on the request span (real node:http server and client)', async (t) => {
  const express = require('express');
  const http = require('node:http');
  const { rateLimit } = require('../http/express.js');
  const server = await RedisServer.start();
  t.after(() => server.stop());
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const tracer = provider.getTracer('test');
  const backend = Backend.redis(server.url, { prefix: `otelhttp${process.pid}` });
  const app = express();
  app.use(rateLimit({ limiter: backend.window('api', 1, 'hour') }));
  app.get('/', (req, res) => res.send('hello'));
  // Each request in its own active server span, as @opentelemetry/instrumentation-http makes one.
  const web = http.createServer((req, res) =>
    tracer.startActiveSpan(`${req.method} ${req.url}`, (span) => {
      res.on('finish', () => span.end());
      app(req, res);
    }),
  );
  await new Promise((resolve) => web.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${web.address().port}/`;
    const statuses = [];
    for (let i = 0; i < 2; i++) statuses.push((await fetch(url)).status);
    assert.deepEqual(statuses, [200, 429]);
    const spans = exporter.getFinishedSpans();
    assert.equal(spans.length, 2);
    const events = spans.map((s) => s.events.map((e) => [e.name, e.attributes['ratekeeper.limiter'], e.attributes['ratekeeper.outcome']]));
    assert.deepEqual(events, [[['ratekeeper.decision', 'api', 'admitted']], [['ratekeeper.decision', 'api', 'refused']]]);
    assert.ok(spans[1].events[0].attributes['ratekeeper.retry_after'] > 0);
    assert.ok(!JSON.stringify(spans.map((s) => s.events)).includes('127.0.0.1'), 'the key (the client address) is no attribute');
  } finally {
    await new Promise((resolve) => web.close(resolve));
    context.disable();
    await provider.shutdown();
  }
});

test('otel: the documented setup', async () => {
  // --8<-- [start:setup]
  const { MeterProvider, PeriodicExportingMetricReader, InMemoryMetricExporter } = require('@opentelemetry/sdk-metrics');
  const { Backend } = require('ratekeeper');
  const { instrument } = require('ratekeeper/otel');

  // The application's provider; in production a PeriodicExportingMetricReader of an OTLPMetricExporter.
  const exporter = new InMemoryMetricExporter(0 /* cumulative */);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });

  const backend = Backend.memory();
  instrument(backend, { meterProvider }); // no meterProvider: the global one
  const api = backend.tokenBucket('api', 10, 2);
  for (let i = 0; i < 3; i++) await api.check('user-42');
  // ratekeeper.decisions{ratekeeper.limiter="api", ratekeeper.kind="token_bucket",
  //                      ratekeeper.outcome="admitted"} = 2, ...{outcome="refused"} = 1
  // --8<-- [end:setup]
  await reader.forceFlush();
  const [decisions] = exporter.getMetrics()[0].scopeMetrics[0].metrics.filter((m) => m.descriptor.name === 'ratekeeper.decisions');
  const counts = Object.fromEntries(decisions.dataPoints.filter((p) => p.value).map((p) => [p.attributes['ratekeeper.outcome'], p.value]));
  assert.deepEqual(counts, { admitted: 2, refused: 1 });
  await meterProvider.shutdown();
});
