#!/usr/bin/env node
// Node benchmark: what ratekeeper/otel costs a check, instrumentation on against off, in one run.
// Not a test: nothing is asserted.
//
//   node bench/node/bench-otel.js          (uses ../../node as built, with its dev dependencies
//                                           installed: build it in release, node node/scripts/build.js)
//   node bench/node/bench-otel.js --quick    (or BENCH_ROUNDS=3 BENCH_SECONDS=1)
//
// Two memory token buckets that admit every call (a burst of 10^9), each on its own backend,
// `await check('k')` in a plain loop: "off" has no instrumentation; "on" is instrumented on a
// MeterProvider whose reader the loop makes collect every 100 ms (600 times the SDK's default
// rate; a timer would never fire inside the loop), so the callbacks' cost falls inside the timed
// rounds. Rounds alternate off, on, ...; medians are printed.
'use strict';

const path = require('node:path');
const results = require('./report');

const NODE = path.resolve(__dirname, '..', '..', 'node');
const fromNode = (name) => require(require.resolve(name, { paths: [NODE] }));
const { Backend } = require(NODE);
const otel = require(path.join(NODE, 'otel.js'));
const { MeterProvider, PeriodicExportingMetricReader, InMemoryMetricExporter, AggregationTemporality } =
  fromNode('@opentelemetry/sdk-metrics');

const QUICK = process.argv.includes('--quick');
const SECONDS = Number(process.env.BENCH_SECONDS || (QUICK ? 1 : 2));
const ROUNDS = Number(process.env.BENCH_ROUNDS || (QUICK ? 3 : 7));
const EXPORT_MS = 100;
const TARGET = 0.85; // instrumented: at most 15% slower

/** Checks per second of `limiter` for `seconds`; `collect` (or nothing) every EXPORT_MS. */
async function rate(limiter, seconds, collect) {
  let calls = 0;
  const start = performance.now();
  let last = start;
  let elapsed = 0;
  while ((elapsed = performance.now() - start) < seconds * 1000) {
    for (let i = 0; i < 10000; i++) await limiter.check('k');
    calls += 10000;
    const now = performance.now();
    if (now - last >= EXPORT_MS) {
      last = now;
      if (collect) await collect();
    }
  }
  return calls / (elapsed / 1000);
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const fmt = (n) => Math.round(n).toLocaleString('en-US');

async function main() {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const provider = new MeterProvider({ readers: [reader] });
  let collections = 0;
  const collect = async () => {
    await reader.collect();
    collections++;
  };
  const offBackend = Backend.memory();
  const onBackend = Backend.memory();
  otel.instrument(onBackend, { meterProvider: provider });
  // A handful of limiters beside the one checked, so each collection reads several.
  const others = Array.from({ length: 9 }, (_, i) => onBackend.tokenBucket(`other-${i}`, 10, 10));
  for (const o of others) await o.check('k');
  const off = offBackend.tokenBucket('bench', 1_000_000, 1e9);
  const on = onBackend.tokenBucket('bench', 1_000_000, 1e9);
  await rate(off, SECONDS / 4, null);
  await rate(on, SECONDS / 4, collect);
  const offRates = [];
  const onRates = [];
  for (let r = 0; r < ROUNDS; r++) {
    offRates.push(await rate(off, SECONDS, null));
    onRates.push(await rate(on, SECONDS, collect));
  }
  await provider.shutdown();
  const [offRate, onRate] = [median(offRates), median(onRates)];
  console.log(`| memory tokenBucket await check (Node) | checks/s (median of ${ROUNDS}) |`);
  console.log('|---|---:|');
  console.log(`| not instrumented | ${fmt(offRate)} |`);
  console.log(`| instrumented, collected every ${EXPORT_MS} ms | ${fmt(onRate)} |`);
  console.log(`on / off = ${(onRate / offRate).toFixed(3)} (target ≥ ${TARGET}); ${collections} collections`);
  results.write('bench-node-otel', 'Node', 'ratekeeper/otel instrumentation on against off (Node, memory check)',
    'node bench/node/bench-otel.js', `median of ${ROUNDS} alternating rounds of ${SECONDS} s; on: collected every ${EXPORT_MS} ms; loaded machine`, [
      results.row(`memory tokenBucket await check, instrumented (collected every ${EXPORT_MS} ms)`, onRate, 'not instrumented', offRate, { target: TARGET }),
    ], {
      note:
        'loaded machine: 2 cores shared with other builds and tests while it ran (see machine.load); ' +
        "on records each check's duration into the SDK's histogram at collection time",
    });
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
