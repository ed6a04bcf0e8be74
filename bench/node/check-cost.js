#!/usr/bin/env node
// Where the time of an in-process Node check goes: nanoseconds per call of each layer of
// `limiter.check` / `checkSync` on the memory backend, beside rate-limiter-flexible's memory
// `consume`, in one run (interleaved rounds, median). Not a test and not a table of the README:
// it tells what to optimise. Uses the addon as built (run `node node/scripts/build.js` first).
//
//   node bench/node/check-cost.js            BENCH_SECONDS (0.5) per case and round, BENCH_ROUNDS (5)
//
// The layers, from the bottom:
//   native method          `nativeLimiter.handle()`: one napi method call on the object, no work
//   native function        `limiterCheckSync(h)` of an `unlimited` limiter: a module function
//                          call with its arguments read, no limiter work
//   + key                  the same with a string key: the key's conversion to Rust
//   memory, no key         `limiterCheckSync(h)` of a token bucket: the limiter's own work
//   memory + key           the native half of `checkSync(key)`
//   checkSync              the public call: the JavaScript wrapper and the decision object
//   await check            the public awaited call: the above and a Promise, awaited
//   await Promise.resolve  a Promise made in JavaScript and awaited, nothing else
'use strict';

const path = require('node:path');
const root = path.resolve(__dirname, '..', '..');
const rk = require(path.join(root, 'node'));
const addon = require(path.join(root, 'node', 'addon.js'));
const { RateLimiterMemory } = require('rate-limiter-flexible');

const SECONDS = Number(process.env.BENCH_SECONDS || 0.5);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 5);
const KEYS = 1000;
const keys = Array.from({ length: KEYS }, (_, i) => `user-${i}`);

const nativeBucket = addon.NativeBackend.memory().tokenBucket('bench', 1e6, 1e9);
const nativeUnlimited = addon.NativeLimiter.unlimited();
const bucketHandle = nativeBucket.handle();
const unlimitedHandle = nativeUnlimited.handle();
const limiter = rk.Backend.memory().tokenBucket('bench', 1e6, 1e9);
const rlf = new RateLimiterMemory({ points: 1e12, duration: 1 });
const decision = { allowed: true };

const sync = [
  ['native method (handle())', () => nativeBucket.handle()],
  ['native function, unlimited, no key', () => addon.limiterCheckSync(unlimitedHandle)],
  ['native function, unlimited, + key', (i) => addon.limiterCheckSync(unlimitedHandle, keys[i])],
  ['native function, memory, no key', () => addon.limiterCheckSync(bucketHandle)],
  ['native function, memory, + key', (i) => addon.limiterCheckSync(bucketHandle, keys[i])],
  ['checkSync(key)', (i) => limiter.checkSync(keys[i])],
];
const awaited = [
  ['await Promise.resolve(object)', () => Promise.resolve(decision)],
  ['await check(key)', (i) => limiter.check(keys[i])],
  ['await rate-limiter-flexible consume(key)', (i) => rlf.consume(keys[i])],
];

function runSync(f) {
  let done = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(SECONDS * 1e9));
  while (process.hrtime.bigint() < end) {
    for (let i = 0; i < 1024; i++) f(done++ % KEYS);
  }
  return Number(process.hrtime.bigint() - start) / done;
}

async function runAwaited(f) {
  let done = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(SECONDS * 1e9));
  while (process.hrtime.bigint() < end) {
    for (let i = 0; i < 64; i++) await f(done++ % KEYS);
  }
  return Number(process.hrtime.bigint() - start) / done;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const cases = [...sync.map(([n, f]) => [n, f, false]), ...awaited.map(([n, f]) => [n, f, true])];
  const ns = new Map(cases.map(([n]) => [n, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, f, isAwaited] of cases) ns.get(name).push(isAwaited ? await runAwaited(f) : runSync(f));
  }
  const load = require('node:fs').readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(`node ${process.version}; median of ${ROUNDS} interleaved rounds of ${SECONDS} s; load ${load}\n`);
  console.log('| layer | ns per call |');
  console.log('|---|---:|');
  for (const [name] of cases) console.log(`| ${name} | ${median(ns.get(name)).toFixed(1)} |`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
