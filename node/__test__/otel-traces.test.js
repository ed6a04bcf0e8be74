'use strict';
// ratekeeper/otel's traces through the OpenTelemetry SDK's in-memory span exporter, on a real
// redis-server and on memory: with a tracer provider, one span per check/checkSync/acquire in the
// caller's active span, carrying the decision and never the key; without one (or with
// `traces: false`), no span. Each round trip of Node's driven connection is a client span: the
// child of its call's span when it carried one traced call, else linked to each call's span
// (see the Observability page).

const test = require('node:test');
const assert = require('node:assert/strict');
const { context, SpanKind } = require('@opentelemetry/api');
const { MeterProvider } = require('@opentelemetry/sdk-metrics');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { Backend, codes } = require('../index.js');
const otel = require('../otel.js');
const native = require('../ratekeeper.node');
const { RedisServer, RedisCluster, waitUntil } = require('./support/redis.js');

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

/** Checks until one is answered on the driven connection (the first calls run on the runtime
 * while it connects). */
async function driven(limiter) {
  await waitUntil('a driven connection', 10_000, async () => {
    await limiter.check('warmup', 0);
    return native.drivenConnections() > 0;
  });
}

/** Resolves once the round-trip spans of the calls settled so far are made (otel.js makes them
 * once the calls of a round trip have all settled, in a setImmediate). */
function roundTripsMade() {
  return new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
}

/** The spans of `exporter` that are round trips (client spans), after checking each has no key. */
function roundTrips(exporter) {
  const spans = exporter.getFinishedSpans();
  for (const span of spans) {
    for (const value of Object.values(span.attributes)) assert.ok(!String(value).includes(KEY), `${span.name}`);
  }
  return spans.filter((s) => s.kind === SpanKind.CLIENT);
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
    // Round trips are the next test's.
    await roundTripsMade();
    const spans = exporter.getFinishedSpans().filter((s) => s.kind !== SpanKind.CLIENT);
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
    // The peek's round trip, when it was driven, is the last test's.
    await roundTripsMade();
    const spans = exporter.getFinishedSpans().filter((s) => s.kind !== SpanKind.CLIENT);
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
    await driven(backend.tokenBucket('warm', 1, 10));
    await scripted(backend, provider);
    await Promise.all(Array.from({ length: 10 }, () => backend.tokenBucket('many', 1, 100).check(KEY)));
    await roundTripsMade();
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

/**
 * A redis-server and a backend on it (keys under `prefix`) traced into `exporter`, whose driven
 * connection is up (`api`: a limiter of it); no span exported yet.
 */
async function drivenTraced(t, prefix) {
  const server = await RedisServer.start();
  t.after(() => server.stop());
  const { provider, exporter } = tracing(t);
  const backend = Backend.redis(server.url, { prefix: `${prefix}${process.pid}` });
  const handle = otel.instrument(backend, { meterProvider: new MeterProvider(), tracerProvider: provider });
  t.after(() => handle.close());
  const api = backend.tokenBucket('api', 1, 1000);
  await driven(api);
  await roundTripsMade();
  exporter.reset();
  return { server, exporter, handle, api };
}

test('otel traces: each driven Redis round trip is a client span, the child of its one call or linked to its calls', async (t) => {
  const { server, exporter, handle, api } = await drivenTraced(t, 'oteltrip');

  const expectRoundTrip = (trip) => {
    assert.equal(trip.name, 'EVALSHA');
    assert.deepEqual(
      [trip.attributes['db.system.name'], trip.attributes['db.operation.name']],
      ['redis', 'EVALSHA'],
    );
    assert.deepEqual([trip.attributes['server.address'], trip.attributes['server.port']], ['127.0.0.1', server.port]);
    assert.equal(trip.attributes['error.type'], undefined);
    assert.ok(trip.endTime[0] * 1e9 + trip.endTime[1] >= trip.startTime[0] * 1e9 + trip.startTime[1]);
  };

  // One after another: each call's round trip is its child, with no link.
  for (let i = 0; i < 3; i++) await api.check(KEY);
  await roundTripsMade();
  let trips = roundTrips(exporter);
  let calls = exporter.getFinishedSpans().filter((s) => s.name === 'ratekeeper check');
  assert.equal(calls.length, 3);
  assert.equal(trips.length, 3, trips.map((s) => s.name).join());
  assert.deepEqual(
    trips.map((trip) => trip.parentSpanContext?.spanId).sort(),
    calls.map((call) => call.spanContext().spanId).sort(),
  );
  for (const trip of trips) {
    expectRoundTrip(trip);
    assert.equal(trip.links.length, 0);
  }
  for (const call of calls) {
    const trip = trips.find((s) => s.parentSpanContext.spanId === call.spanContext().spanId);
    assert.equal(trip.spanContext().traceId, call.spanContext().traceId);
  }

  // N calls made in one tick: the first is written at once, the others travel together when the
  // loop turns. Each call is in exactly one round trip: its child, or linked from it.
  exporter.reset();
  const N = 20;
  await Promise.all(Array.from({ length: N }, () => api.check(KEY)));
  await roundTripsMade();
  trips = roundTrips(exporter);
  calls = exporter.getFinishedSpans().filter((s) => s.name === 'ratekeeper check');
  assert.equal(calls.length, N);
  const callIds = new Set(calls.map((c) => c.spanContext().spanId));
  const carried = [];
  for (const trip of trips) {
    expectRoundTrip(trip);
    if (trip.links.length === 0) {
      assert.ok(callIds.has(trip.parentSpanContext?.spanId), 'a round trip of one call is its child');
      carried.push(trip.parentSpanContext.spanId);
    } else {
      assert.ok(trip.links.length >= 2, 'a round trip of one traced call is its child, not linked');
      assert.equal(trip.parentSpanContext, undefined, 'a batched round trip has no single parent');
      assert.equal(trip.attributes['db.operation.batch.size'], trip.links.length);
      for (const link of trip.links) carried.push(link.context.spanId);
    }
  }
  assert.equal(carried.length, N, 'links + children = calls');
  assert.deepEqual(new Set(carried), callIds);
  assert.ok(trips.some((trip) => trip.links.length >= 2), 'the calls of one tick shared a round trip');

  // Closed: no more round trips.
  handle.close();
  exporter.reset();
  await Promise.all(Array.from({ length: 5 }, () => api.check(KEY)));
  await roundTripsMade();
  assert.equal(exporter.getFinishedSpans().length, 0);
});

test('otel traces: a driven round trip cut by a failed connection has error.type io', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const { provider, exporter } = tracing(t);
  const backend = Backend.redis(server.url, { prefix: `oteltrio${process.pid}`, deadlineMs: 10_000, failurePolicy: 'fail_open' });
  const handle = otel.instrument(backend, { meterProvider: new MeterProvider(), tracerProvider: provider });
  t.after(() => handle.close());
  const api = backend.tokenBucket('api', 1, 1000);
  await driven(api);
  await roundTripsMade();
  exporter.reset();
  // The server stops answering; the calls are written; then it dies: the connection fails.
  process.kill(server.pid, 'SIGSTOP');
  const N = 5;
  const calls = Promise.all(Array.from({ length: N }, () => api.check(KEY)));
  await waitUntil('the calls written', 10_000, async () => {
    await new Promise((resolve) => setImmediate(resolve));
    return native.drivenInFlight() > 0;
  });
  // SIGKILL while stopped: it dies without answering (the fixture's stop would continue it first).
  process.kill(server.pid, 'SIGKILL');
  const decisions = await calls;
  assert.ok(decisions.every((d) => d.allowed && d.remaining === 1000), 'fail_open: not answered by Redis');
  await roundTripsMade();
  const trips = roundTrips(exporter);
  assert.ok(trips.length > 0);
  let carried = 0;
  for (const trip of trips) {
    assert.equal(trip.attributes['error.type'], 'io');
    assert.equal(trip.status.code, 2, 'an error status');
    carried += trip.links.length || 1;
  }
  assert.equal(carried, N);
});

/**
 * The runtime path's calls (every call but a driven check or peek): one round trip each, a client
 * span child of its call's span, with the server's address when there is one (a cluster's
 * configured seeds name no single server), and never the key.
 */
async function runtimeRoundTrips(t, backend, server) {
  const { provider, exporter } = tracing(t);
  // One slot per key on a cluster, so that checkAll's parts are one atomic step.
  const api = backend.limiter('api', { kind: 'token_bucket', rate: 0.001, capacity: 100, colocate: 'tenant' });
  const pool = backend.limiter('pool', { kind: 'concurrent', limit: 10, lock_timeout: 30, colocate: 'tenant' });
  // Untraced warm-up: every script this sequence runs is loaded (no NOSCRIPT round trip).
  const warm = await api.check('warm');
  await api.settle(warm, 1);
  await pool.release((await pool.acquire('warm')).lease);
  await backend.checkAll([{ limiter: api, key: 'warm' }, { limiter: pool, key: 'warm' }]);
  const handle = otel.instrument(backend, { meterProvider: new MeterProvider(), tracerProvider: provider });
  t.after(() => handle.close());

  const checked = api.checkSync(KEY, 2);
  const lease = await pool.acquire(KEY);
  await api.settle(checked, 1);
  api.settleSync(checked, 3);
  const combined = await backend.checkAll([{ limiter: api, key: KEY }, { limiter: pool, key: KEY }]);
  await pool.release(lease.lease);
  await pool.release(combined.parts[1].decision.lease);
  await roundTripsMade();

  const trips = roundTrips(exporter);
  const calls = exporter.getFinishedSpans().filter((s) => s.kind !== SpanKind.CLIENT);
  assert.deepEqual(calls.map((s) => s.name), [
    'ratekeeper check',
    'ratekeeper acquire',
    'ratekeeper settle',
    'ratekeeper settle',
    'ratekeeper check_all',
    'ratekeeper release',
    'ratekeeper release',
  ]);
  // One round trip per call, each the child of its call, in its trace.
  assert.equal(trips.length, calls.length, trips.map((s) => s.name).join());
  for (const call of calls) {
    const mine = trips.filter((s) => s.parentSpanContext?.spanId === call.spanContext().spanId);
    assert.equal(mine.length, 1, `${call.name}: one round trip`);
    const [trip] = mine;
    assert.equal(trip.spanContext().traceId, call.spanContext().traceId);
    assert.equal(trip.name, 'EVALSHA');
    assert.deepEqual([trip.attributes['db.system.name'], trip.attributes['db.operation.name']], ['redis', 'EVALSHA']);
    const where = server ? ['127.0.0.1', server.port] : [undefined, undefined];
    assert.deepEqual([trip.attributes['server.address'], trip.attributes['server.port']], where);
    assert.equal(trip.attributes['error.type'], undefined);
    assert.equal(trip.links.length, 0);
    const ns = (time) => time[0] * 1e9 + time[1];
    // (The wall clock's times: the SDK's own clock may drift from it, so no comparison with the call's.)
    assert.ok(ns(trip.endTime) >= ns(trip.startTime));
  }

  // Closed: no round trip noted, no span.
  handle.close();
  exporter.reset();
  api.checkSync(KEY);
  await backend.checkAll([{ limiter: api, key: KEY }]);
  await roundTripsMade();
  assert.equal(exporter.getFinishedSpans().length, 0);
}

test('otel traces: each round trip of a call on the runtime is a client span, the child of its call (redis)', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.stop());
  await runtimeRoundTrips(t, Backend.redis(server.url, { prefix: `otelrt${process.pid}` }), server);
});

test('otel traces: each round trip of a call on a Redis Cluster is a client span, the child of its call', async (t) => {
  const cluster = await RedisCluster.start();
  t.after(() => cluster.destroy());
  await runtimeRoundTrips(t, Backend.cluster(cluster.seeds, { prefix: `otelrc${process.pid}` }), null);
});

test('otel traces: a check before the driven connection is up has its round trip as its child', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.stop());
  const { provider, exporter } = tracing(t);
  const backend = Backend.redis(server.url, { prefix: `otelfirst${process.pid}` });
  // Untraced: the script loaded, on another connection key (its own backend, so the driven
  // connection of the traced one is not up yet).
  await Backend.redis(server.url, { prefix: `otelfirst${process.pid}` }).tokenBucket('api', 1, 10).checkSync('warm');
  const handle = otel.instrument(backend, { meterProvider: new MeterProvider(), tracerProvider: provider });
  t.after(() => handle.close());
  await backend.tokenBucket('api', 1, 10).check(KEY);
  await roundTripsMade();
  const [call] = exporter.getFinishedSpans().filter((s) => s.name === 'ratekeeper check');
  const trips = roundTrips(exporter);
  assert.equal(trips.length, 1, 'its one round trip, on the runtime or driven');
  assert.equal(trips[0].parentSpanContext?.spanId, call.spanContext().spanId);
});

test('otel traces: each round trip of a call over TLS is a client span, the child of its call', async (t) => {
  const { server, ca } = await RedisServer.startTlsWithCa(t);
  t.after(() => server.destroy());
  const backend = Backend.redis(`rediss://127.0.0.1:${server.port}`, { prefix: `oteltls${process.pid}`, tls: { ca } });
  await runtimeRoundTrips(t, backend, server);
});

test('otel traces: a driven check re-run after NOSCRIPT has its round trips as its children', async (t) => {
  const { server, exporter, api } = await drivenTraced(t, 'otelnoscript');
  server.cli('SCRIPT', 'FLUSH');
  assert.equal((await api.check(KEY)).allowed, true);
  await roundTripsMade();
  const [call] = exporter.getFinishedSpans().filter((s) => s.name === 'ratekeeper check');
  const trips = roundTrips(exporter);
  // The driven EVALSHA answered NOSCRIPT (not a span: its call ran again); on the runtime, the
  // EVALSHA answered NOSCRIPT too, then the script ran with EVAL.
  assert.deepEqual(
    trips.map((s) => [s.name, s.attributes['error.type'], s.status.code]),
    [
      ['EVALSHA', 'NOSCRIPT', 2],
      ['EVAL', undefined, 0],
    ],
  );
  for (const trip of trips) {
    assert.equal(trip.parentSpanContext?.spanId, call.spanContext().spanId);
    assert.deepEqual([trip.attributes['server.address'], trip.attributes['server.port']], ['127.0.0.1', server.port]);
  }
});
