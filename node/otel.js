'use strict';
// ratekeeper's metrics through the OpenTelemetry API, beside an application's own:
// `instrument(backend, { meterProvider })` registers observable counters on the `ratekeeper`
// meter of the application's meter provider (the global one unless given). At each collection
// one batch callback reads `backend.metrics()` (the counts the core keeps anyway, this process's)
// and reports them: a check costs nothing more when instrumented. The limited key is never an
// attribute (one series per user would be unbounded cardinality): only the limiter's name, its
// kind and the outcome are. `annotate(limiter, decision)` adds a decision to the active span.
// @opentelemetry/api is an optional peer dependency. Names and their mapping to ASP.NET Core's and
// Envoy's: the docs' Observability page.

const api = require('@opentelemetry/api');
const { version } = require('./package.json');
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
    'Checks refused by a hold (a block: blockFor after a refusal, or block by hand); also in ratekeeper.decisions.',
    (m) => [[{ 'ratekeeper.hold': 'block' }, m.blocked]],
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

/** The instruments of one meter provider and the backends they report (an instrument's name registers once per meter). */
const registrations = new WeakMap();

function registration(provider) {
  let known = registrations.get(provider);
  if (known) return known;
  const meter = provider.getMeter('ratekeeper', version);
  known = { backends: new Set() };
  const instruments = INSTRUMENTS.map(([name, unit, description, counts]) => ({
    instrument: meter.createObservableCounter(name, { unit, description }),
    counts,
  }));
  meter.addBatchObservableCallback(
    async (result) => {
      const rows = (await Promise.all([...known.backends].map((b) => b.metrics()))).flat();
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
    instruments.map((i) => i.instrument),
  );
  registrations.set(provider, known);
  return known;
}

/**
 * Reports `backend`'s metrics (this process's) through the OpenTelemetry API on the `ratekeeper`
 * meter of `options.meterProvider` (the global meter provider unless given). `tracerProvider` is
 * accepted for the same call in every language; `annotate` puts decisions on the active span,
 * which needs no provider of its own. Returns `{ close() }`, which stops reporting this backend.
 */
function instrument(backend, options) {
  if (options != null && typeof options !== 'object') throw invalidOption('options', 'must be an object');
  for (const name of Object.keys(options ?? {})) {
    if (name !== 'meterProvider' && name !== 'tracerProvider') {
      throw invalidOption(name, 'is not an option (known: meterProvider, tracerProvider)');
    }
  }
  if (backend === null || typeof backend !== 'object' || typeof backend.metrics !== 'function') {
    throw invalidOption('backend', 'must be a ratekeeper Backend');
  }
  const provider = options?.meterProvider ?? api.metrics.getMeterProvider();
  if (provider === null || typeof provider !== 'object' || typeof provider.getMeter !== 'function') {
    throw invalidOption('meterProvider', 'must be an OpenTelemetry MeterProvider');
  }
  const known = registration(provider);
  known.backends.add(backend);
  return {
    close() {
      known.backends.delete(backend);
    },
  };
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
