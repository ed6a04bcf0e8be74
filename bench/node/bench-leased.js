#!/usr/bin/env node
// Node benchmark: leased checks per second against the 1M/s target, beside the memory
// backend's token bucket, in one run. Not a test: nothing is asserted.
//
//   node bench/node/bench-leased.js          (uses ../../node as built; build it in release:
//                                             node node/scripts/build.js)
//   BENCH_ROUNDS=3 BENCH_SECONDS=1 node bench/node/bench-leased.js
//
// Starts its own redis-server on a free loopback port (never 6379) and stops it by pid. Both
// limiters refill 1,000,000 per second with a burst of 10^9 (every call admitted), no key;
// `checkSync()` (a Decision, no Promise) and `await check()` in plain loops; rounds alternate
// memory and leased; medians are printed.
'use strict';

const results = require('./report');
const { startRedis } = require('./redis-server');

const path = require('node:path');

const SECONDS = Number(process.env.BENCH_SECONDS || 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5);
const TARGET = 1_000_000;
const { Backend } = require(path.resolve(__dirname, '..', '..', 'node'));

function syncRate(limiter, seconds) {
  let calls = 0;
  const start = performance.now();
  let elapsed = 0;
  while ((elapsed = performance.now() - start) < seconds * 1000) {
    for (let i = 0; i < 10000; i++) limiter.checkSync();
    calls += 10000;
  }
  return calls / (elapsed / 1000);
}

async function asyncRate(limiter, seconds) {
  let calls = 0;
  const start = performance.now();
  let elapsed = 0;
  while ((elapsed = performance.now() - start) < seconds * 1000) {
    for (let i = 0; i < 10000; i++) await limiter.check();
    calls += 10000;
  }
  return calls / (elapsed / 1000);
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const fmt = (n) => Math.round(n).toLocaleString('en-US');

async function main() {
  const redis = await startRedis();
  try {
    const memory = Backend.memory().tokenBucket('bench', 1_000_000, 1e9);
    const leased = Backend.redis(redis.url).leased('bench', 1_000_000, 1e9, { leaseTtlMs: 10000 });
    const rows = { 'memory checkSync': [], 'leased checkSync': [], 'memory await check': [], 'leased await check': [] };
    syncRate(memory, SECONDS / 4);
    syncRate(leased, SECONDS / 4);
    for (let r = 0; r < ROUNDS; r++) {
      rows['memory checkSync'].push(syncRate(memory, SECONDS));
      rows['leased checkSync'].push(syncRate(leased, SECONDS));
      rows['memory await check'].push(await asyncRate(memory, SECONDS));
      rows['leased await check'].push(await asyncRate(leased, SECONDS));
    }
    await leased.close();
    console.log(`| limiter (Node) | checks/s (median of ${ROUNDS}) | vs 1M/s target |`);
    console.log('|---|---:|---:|');
    for (const [name, v] of Object.entries(rows)) {
      console.log(`| ${name} | ${fmt(median(v))} | ${(median(v) / TARGET).toFixed(2)}x |`);
    }
    const m = (name) => median(rows[name]);
    results.write('bench-node-leased', 'leased', 'Leased token bucket on Redis against the memory token bucket (Node)',
      'node bench/node/bench-leased.js', `median of ${ROUNDS} alternating rounds of ${SECONDS} s`, [
        results.row('leased on Redis, checkSync', m('leased checkSync'), 'memory token bucket, checkSync', m('memory checkSync')),
        results.row('leased on Redis, await check', m('leased await check'), 'memory token bucket, await check', m('memory await check')),
        results.row('leased on Redis, await check, against the 1M/s target', m('leased await check'), '1M/s target', TARGET, { target: 1.0 }),
      ]);
  } finally {
    redis.stop();
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
