'use strict';
// ratekeeper's metrics through the OpenTelemetry API, beside an application's own:
// `instrument(backend, { meterProvider })` registers observable counters on the `ratekeeper`
// meter of the application's meter provider (the global one unless given). At each collection
// one batch callback reads `backend.metrics()` (the counts the core keeps anyway, this process's)
// and reports them. The duration histograms (`ratekeeper.check.duration`, `ratekeeper.wait.duration`)
// are synchronous: the OpenTelemetry API has no asynchronous histogram, and one `record` costs the
// SDK more than a memory check, so the core times each call of an instrumented backend
// (`backend.startObserving()`) and the same callback records the calls timed since the last
// collection (`backend.durations()`), each at its bucket's mean: counts and sums are exact. The limited key is never an
// attribute (one series per user would be unbounded cardinality): only the limiter's name, its
// kind and the outcome are. `annotate(limiter, decision)` adds a decision to the active span.
// @opentelemetry/api is an optional peer dependency. Names and their mapping to ASP.NET Core's and
// Envoy's: the docs' Observability page.

const api = require('@opentelemetry/api');
const { version } = require('./package.json');
const ratekeeper = require('./index.js');

const { Backend, codes } = ratekeeper;
/** index.js's hook for tracing calls (see `tracing` there). */
const hook = ratekeeper[Symbol.for('ratekeeper.tracing')];
const { invalidArgument: invalidOption } = require('./http/errors.js');

/** `ratekeeper.outcome` values and how each is read from a limiter's counts (they partition the checks). */
const OUTCOMES = [
  ['admitted', (m) => m.allowed],
  ['refused', (m) => Math.max(m.refused - m.refusedLocally, 0)],
  ['shadow_refused', (m) => m.shadowRefused],
  ['refused_locally', (m) => m.refusedLocally],
  ['failed_open', (m) => m.failedOpen],
  ['fallback', (m) => m.fellBack],
  ['error', (m) => m.errors],
];

// Each instrument: name, unit, description, and its counts per limiter as [extra attributes, value].
const INSTRUMENTS = [
  [
    'ratekeeper.decisions',
    '{decision}',
    'Checks by outcome (admitted, refused, shadow_refused, refused_locally, failed_open, fallback, error).',
    (m) => OUTCOMES.map(([outcome, read]) => [{ 'ratekeeper.outcome': outcome }, read(m)]),
  ],
  [
    'ratekeeper.holds',
    '{decision}',
    'Checks refused by a hold (a pause, or a block: blockFor after a refusal, or block by hand); also in ratekeeper.decisions.',
    (m) => [
      [{ 'ratekeeper.hold': 'pause' }, m.paused],
      [{ 'ratekeeper.hold': 'block' }, m.blocked],
    ],
  ],
  [
    'ratekeeper.settle.units',
    '{unit}',
    'Units settles charged (the call cost more than checked) or asked to refund (it cost less).',
    (m) => [
      [{ 'ratekeeper.direction': 'charged' }, m.settleCharged],
      [{ 'ratekeeper.direction': 'refunded' }, m.settleRefunded],
    ],
  ],
  [
    'ratekeeper.leases.granted',
    '{lease}',
    'Leases granted by concurrent limiters, by whether the caller waited.',
    (m) => [
      [{ 'ratekeeper.wait': 'immediate' }, m.immediate],
      [{ 'ratekeeper.wait': 'waited' }, m.waited],
    ],
  ],
];

// The duration histograms: the call they time (`backend.durations()`), name, description.
const HISTOGRAMS = [
  ['check', 'ratekeeper.check.duration', 'Duration of checks, by outcome.'],
  [
    'wait',
    'ratekeeper.wait.duration',
    'Duration of calls that may wait (acquire, withinLimit) until admitted, refused or failed.',
  ],
];

/** A backend's durations by series (name, kind, call, outcome) as { name, kind, call, outcome, counts, sumsNs }. */
function durationsOf(backend) {
  const out = new Map();
  for (const s of backend.durations()) out.set(JSON.stringify([s.name, s.kind, s.call, s.outcome]), s);
  return out;
}

/**
 * The share of the time between two collections that recording durations may take: at the SDK's
 * default 60 s interval the one-second cap binds first (1.7%); with frequent collections this
 * keeps an instrumented process's recording as small.
 */
const RECORD_SHARE = 0.02;
// A collection records this many values whatever the time, and never for longer than this.
const FREE_RECORDS = 100;
const MAX_RECORD_MS = 1000;
// Values recorded between two readings of the clock past the free ones.
const CHUNK = 16;

/**
 * Records the calls each backend timed since the last collection into the histograms: per
 * bucket, its new calls at their mean (the mean of durations in a bucket lies in that bucket).
 * Past its first FREE_RECORDS values, recording takes at most RECORD_SHARE of the time since the
 * last collection: the SDK's `record` costs more than a memory check, so a process checking faster
 * than the SDK records would otherwise spend its event loop here. What is left is recorded at the
 * next collections, so counts and sums stay exact, late.
 */
function recordDurations(known) {
  const now = performance.now();
  const until = now + Math.min(RECORD_SHARE * (now - known.lastRecorded), MAX_RECORD_MS);
  known.lastRecorded = now;
  let free = FREE_RECORDS;
  for (const [backend, seen] of known.backends) {
    for (const [id, s] of durationsOf(backend)) {
      let before = seen.get(id);
      if (!before) {
        before = { counts: s.counts.map(() => 0), sumsNs: s.sumsNs.map(() => 0) };
        seen.set(id, before);
      }
      const attributes = { 'ratekeeper.limiter': s.name, 'ratekeeper.kind': s.kind, 'ratekeeper.outcome': s.outcome };
      const histogram = known.histograms[s.call];
      s.counts.forEach((count, i) => {
        const n = count - before.counts[i];
        if (n <= 0) {
          // A dropped limiter object takes its timings along: never below zero.
          before.counts[i] = count;
          before.sumsNs[i] = s.sumsNs[i];
          return;
        }
        const value = (s.sumsNs[i] - before.sumsNs[i]) / n / 1e9;
        let done = 0;
        while (done < n && (free > 0 || performance.now() < until)) {
          const chunk = Math.min(n - done, free > 0 ? free : CHUNK);
          for (let k = 0; k < chunk; k++) histogram.record(value, attributes);
          done += chunk;
          free -= chunk;
        }
        before.counts[i] += done;
        before.sumsNs[i] = done === n ? s.sumsNs[i] : before.sumsNs[i] + Math.round(value * 1e9 * done);
      });
    }
  }
}

/** The instruments of one meter provider and the backends they report (an instrument's name registers once per meter). */
const registrations = new WeakMap();

function registration(provider) {
  let known = registrations.get(provider);
  if (known) return known;
  const meter = provider.getMeter('ratekeeper', version);
  const advice = { explicitBucketBoundaries: Backend.durationBounds() };
  // backends: each backend and the durations its histograms hold so far.
  known = { backends: new Map(), histograms: {}, lastRecorded: performance.now() };
  for (const [call, name, description] of HISTOGRAMS) {
    known.histograms[call] = meter.createHistogram(name, { unit: 's', description, advice });
  }
  const instruments = INSTRUMENTS.map(([name, unit, description, counts]) => ({
    instrument: meter.createObservableCounter(name, { unit, description }),
    counts,
  }));
  const held = meter.createObservableUpDownCounter('ratekeeper.leases.held', {
    unit: '{lease}',
    description: 'Leases of concurrent limiters this process holds (granted, not yet released).',
  });
  meter.addBatchObservableCallback(
    async (result) => {
      // Before the SDK reads the synchronous instruments of this collection.
      recordDurations(known);
      const rows = (await Promise.all([...known.backends.keys()].map((b) => b.metrics()))).flat();
      // Every concurrent limiter, none held included: a count that falls to zero shows it.
      for (const { name, kind, metrics } of rows) {
        if (kind === 'concurrent') {
          result.observe(held, metrics.leasesHeld, { 'ratekeeper.limiter': name, 'ratekeeper.kind': kind });
        }
      }
      for (const { instrument, counts } of instruments) {
        // Two backends' limiters of one name add up.
        const totals = new Map();
        for (const { name, kind, metrics } of rows) {
          const values = counts(metrics);
          // A limiter with no count of this instrument is not a series of it (settles of a limiter
          // never settled, leases of a kind without leases); a cumulative count once non-zero stays so.
          if (!values.some(([, value]) => value)) continue;
          for (const [extra, value] of values) {
            const attributes = { 'ratekeeper.limiter': name, 'ratekeeper.kind': kind, ...extra };
            const id = JSON.stringify(attributes);
            const sum = totals.get(id);
            totals.set(id, { attributes, value: (sum ? sum.value : 0) + value });
          }
        }
        for (const { attributes, value } of totals.values()) result.observe(instrument, value, attributes);
      }
    },
    [...instruments.map((i) => i.instrument), held],
  );
  registrations.set(provider, known);
  return known;
}

/**
 * Reports `backend`'s metrics (this process's) through the OpenTelemetry API on the `ratekeeper`
 * meter of `options.meterProvider` (the global meter provider unless given). Traces are off
 * unless asked for: a `tracerProvider` turns them on, and so does `traces: true` (on the global
 * tracer provider when no provider is given); `traces: false` keeps them off whatever the
 * provider. Traced, each `check`, `checkSync`, `acquire`, `peek`, `peekSync`, `settle`,
 * `settleSync` and `release` of the backend's limiters, and its `checkAll` and `acquireAll`, makes
 * a span `ratekeeper check` / `… acquire` / `… peek` / `… settle` / `… release` / `… check_all` /
 * `… acquire_all` in the active context (the limiter's name and kind, or `ratekeeper.limiters`
 * for a call over several; the outcome and `ratekeeper.retry_after`; a settle's
 * `ratekeeper.direction` and `ratekeeper.units`; never the key). Returns `{ close() }`, which stops
 * reporting and tracing this backend.
 */
function instrument(backend, options) {
  if (options != null && typeof options !== 'object') throw invalidOption('options', 'must be an object');
  for (const name of Object.keys(options ?? {})) {
    if (name !== 'meterProvider' && name !== 'tracerProvider' && name !== 'traces') {
      throw invalidOption(name, 'is not an option (known: meterProvider, tracerProvider, traces)');
    }
  }
  if (backend === null || typeof backend !== 'object' || typeof backend.durations !== 'function') {
    throw invalidOption('backend', 'must be a ratekeeper Backend');
  }
  const provider = options?.meterProvider ?? api.metrics.getMeterProvider();
  if (provider === null || typeof provider !== 'object' || typeof provider.getMeter !== 'function') {
    throw invalidOption('meterProvider', 'must be an OpenTelemetry MeterProvider');
  }
  const tracerProvider = options?.tracerProvider;
  if (tracerProvider != null && (typeof tracerProvider !== 'object' || typeof tracerProvider.getTracer !== 'function')) {
    throw invalidOption('tracerProvider', 'must be an OpenTelemetry TracerProvider');
  }
  const traces = options?.traces;
  if (traces != null && typeof traces !== 'boolean') throw invalidOption('traces', 'must be a boolean');
  const tracer = (traces ?? tracerProvider != null) ? (tracerProvider ?? api.trace.getTracerProvider()).getTracer('ratekeeper', version) : null;
  const known = registration(provider);
  const observed = !known.backends.has(backend);
  if (observed) {
    backend.startObserving();
    // Calls timed before this instrumentation are not its to report.
    known.backends.set(backend, durationsOf(backend));
  }
  if (tracer !== null) startTracing(backend.id, tracer);
  let open = true;
  return {
    close() {
      if (!open) return;
      open = false;
      if (observed && known.backends.delete(backend)) backend.stopObserving();
      if (tracer !== null) stopTracing(backend.id, tracer);
    },
  };
}

/** The tracers of each traced backend (by `backend.id`): one per `instrument` call with traces. */
const tracers = new Map();

function startTracing(id, tracer) {
  const list = tracers.get(id) ?? [];
  list.push(tracer);
  tracers.set(id, list);
  hook.set(traced);
}

function stopTracing(id, tracer) {
  const list = tracers.get(id) ?? [];
  const at = list.indexOf(tracer);
  if (at >= 0) list.splice(at, 1);
  if (list.length === 0) tracers.delete(id);
  // No backend traced: the limiters' calls are back to their one comparison.
  if (tracers.size === 0) hook.set(null);
}

/**
 * The traced calls, by the method index.js hands over: the span's name (`ratekeeper <name>`, the
 * same in every language), whether the call returns a promise, and whether it is a backend's call
 * over several limiters (its span names them all, as `ratekeeper.limiters`).
 */
const SPANS = {
  check: ['check', true],
  checkSync: ['check', false],
  acquire: ['acquire', true],
  peek: ['peek', true],
  peekSync: ['peek', false],
  settle: ['settle', true],
  settleSync: ['settle', false],
  release: ['release', true],
  checkAll: ['check_all', true, true],
  acquireAll: ['acquire_all', true, true],
};

/** A traced call's attributes from its inputs: who it is of (never a key); a settle's direction and units. */
function callAttributes(target, method, all, args) {
  if (all) {
    const parts = Array.isArray(args[0]) ? args[0] : [];
    return { 'ratekeeper.limiters': parts.map((p) => String(p?.limiter?.name)) };
  }
  const attributes = { 'ratekeeper.limiter': target.name, 'ratekeeper.kind': target.kind };
  const [decision, actual] = args;
  const checked = method.startsWith('settle') ? decision?.settle?.cost : undefined;
  if (typeof checked === 'number' && typeof actual === 'number') {
    if (actual !== checked) attributes['ratekeeper.direction'] = actual > checked ? 'charged' : 'refunded';
    attributes['ratekeeper.units'] = Math.abs(actual - checked);
  }
  return attributes;
}

/**
 * index.js's `tracing` while a backend is traced: a call of `target` (a limiter, or a backend for
 * checkAll/acquireAll; by `method`, with `args`) gets a span per tracer of its backend, started in
 * the active context; a call of an untraced backend is made as is.
 */
function traced(target, method, ...args) {
  const [span, isAsync, all] = SPANS[method];
  const list = tracers.get(all ? target.id : target.backendId);
  if (list === undefined) return hook.untraced(target, method, args);
  const attributes = callAttributes(target, method, all, args);
  const parent = api.context.active();
  const spans = list.map((t) => t.startSpan(`ratekeeper ${span}`, { attributes }, parent));
  if (!isAsync) {
    let result;
    try {
      result = hook.untraced(target, method, args, true);
    } catch (error) {
      runtimeRoundTripSpans(hook.runtimeRoundTrips(), list, spans);
      endSpans(spans, false, error);
      throw error;
    }
    runtimeRoundTripSpans(hook.runtimeRoundTrips(), list, spans);
    endSpans(spans, true, result);
    return result;
  }
  const promise = hook.untraced(target, method, args, true);
  // Its round trips are known while its result settles, which is when these continuations run:
  // a check or peek on Redis may travel on the driven connection; any call may run on the runtime.
  const id = hook.callId();
  const settled = () => {
    if (id === undefined) return;
    if (DRIVEN.has(method)) noteRoundTrip(id, list, spans);
    runtimeRoundTripSpans(hook.runtimeRoundTrips(id), list, spans);
  };
  return promise.then(
    (result) => {
      settled();
      endSpans(spans, true, result);
      return result;
    },
    (error) => {
      settled();
      endSpans(spans, false, error);
      throw error;
    },
  );
}

/**
 * The client spans of a call's round trips made on the runtime or on this thread (`trips`, one
 * call's each): children of its span, per tracer of `list`, as Python's and Rust's are.
 */
function runtimeRoundTripSpans(trips, list, spans) {
  for (const trip of trips) {
    for (let i = 0; i < list.length; i++) roundTripSpan(list[i], trip, [spans[i]]);
  }
}

/** The methods whose calls may travel on a driven connection (see node/src/driven.rs). */
const DRIVEN = new Set(['check', 'peek']);

/**
 * Driven round trips whose traced calls are settling, by round trip: `{ trip, calls: [[tracer,
 * span]] }`. A round trip's calls all settle in the poll callback that read its reply, so the
 * round trip's span is made in a setImmediate after it, once they all are here.
 */
const settlingTrips = new Map();

/** Notes that call `id` (its `spans`, one per tracer of `list`) settled, with its round trip. */
function noteRoundTrip(id, list, spans) {
  const trip = hook.roundTrip(id);
  if (trip == null) return; // it ran on the runtime (no driven connection yet)
  let entry = settlingTrips.get(trip.trip);
  if (entry === undefined) {
    if (settlingTrips.size === 0) setImmediate(makeRoundTripSpans);
    entry = { trip, calls: [] };
    settlingTrips.set(trip.trip, entry);
  }
  for (let i = 0; i < list.length; i++) entry.calls.push([list[i], spans[i]]);
}

/** Makes the span of each round trip noted since the last time (per tracer). */
function makeRoundTripSpans() {
  const trips = [...settlingTrips.values()];
  settlingTrips.clear();
  for (const { trip, calls } of trips) {
    const byTracer = new Map();
    for (const [tracer, span] of calls) {
      const spans = byTracer.get(tracer);
      if (spans === undefined) byTracer.set(tracer, [span]);
      else spans.push(span);
    }
    for (const [tracer, spans] of byTracer) roundTripSpan(tracer, trip, spans);
  }
}

/**
 * The client span of a driven round trip, from its recorded times: the child of the call span it
 * carried when it carried one traced call (as a Python or Rust call's round trip is), else (one
 * round trip carrying several callers' calls, which have no single parent) a span of its own
 * trace with a link to each call's span, as OpenTelemetry prescribes for a batch.
 */
function roundTripSpan(tracer, trip, spans) {
  const attributes = { 'db.system.name': 'redis', 'db.operation.name': trip.command };
  if (trip.address != null) {
    attributes['server.address'] = trip.address;
    attributes['server.port'] = trip.port;
  }
  if (trip.batch > 1) attributes['db.operation.batch.size'] = trip.batch;
  if (trip.error != null) attributes['error.type'] = trip.error;
  const one = spans.length === 1;
  const options = { kind: api.SpanKind.CLIENT, startTime: trip.startMs, attributes };
  if (!one) options.links = spans.map((span) => ({ context: span.spanContext() }));
  const parent = one ? api.trace.setSpan(api.ROOT_CONTEXT, spans[0]) : api.ROOT_CONTEXT;
  const span = tracer.startSpan(trip.command, options, parent);
  if (trip.error != null) span.setStatus({ code: api.SpanStatusCode.ERROR });
  span.end(trip.endMs);
}

/**
 * Ends a traced call's spans with its result (a decision, a combined decision, or nothing: a
 * release decides nothing) or its error (over the limit: a refusal).
 */
function endSpans(spans, ok, result) {
  let done;
  if (ok) {
    done = result == null ? {} : { 'ratekeeper.outcome': outcomeOf(result), 'ratekeeper.retry_after': result.retryAfterMs / 1000 };
  } else if (result && result.code === codes.OVER_LIMIT) {
    done = { 'ratekeeper.outcome': 'refused', 'ratekeeper.retry_after': (result.retryAfterMs ?? 0) / 1000 };
  } else {
    done = { 'ratekeeper.outcome': 'error', 'error.type': (result && result.code) || 'Error' };
  }
  for (const span of spans) {
    span.setAttributes(done);
    if (done['error.type'] !== undefined) span.setStatus({ code: api.SpanStatusCode.ERROR });
    span.end();
  }
}

/** A decision's `ratekeeper.outcome`: admitted, refused or shadow_refused. */
function outcomeOf(decision) {
  if (decision.shadowRefused) return 'shadow_refused';
  return decision.allowed ? 'admitted' : 'refused';
}

/**
 * Adds a `ratekeeper.decision` event to the active span when one is recording: the limiter's name
 * and kind, the outcome and `ratekeeper.retry_after` (seconds). Never the key.
 */
function annotate(limiter, decision) {
  const span = api.trace.getActiveSpan();
  if (!span || !span.isRecording()) return;
  span.addEvent('ratekeeper.decision', {
    'ratekeeper.limiter': limiter.name,
    'ratekeeper.kind': limiter.kind,
    'ratekeeper.outcome': outcomeOf(decision),
    'ratekeeper.retry_after': decision.retryAfterMs / 1000,
  });
}

module.exports = { instrument, annotate, outcomeOf, OUTCOMES };
