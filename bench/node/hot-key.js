#!/usr/bin/env node
// One hot key (issue #48, target 4): PROCESSES processes × 64 checks in flight, every check on
// the same key, ratekeeper (Node, release build) against rate-limiter-flexible + ioredis on the
// same redis-server, rounds alternating, medians. A key lives on one primary, so this is the
// ceiling of one key: checks/s, and the server's µs per check from INFO commandstats over the
// same rounds, and redis-server's CPU time per check (I/O and parsing included: 1 / that is the
// most any number of clients can get from one primary's CPU).
//
//   cd bench/node && npm ci && node hot-key.js      (BENCH_NO_BUILD=1: node/ already built)
//
// Limits far above the load: nothing is refused. ratekeeper's token bucket and `bucket` (fixed
// window) against rate-limiter-flexible's consume (a fixed window). Throughput on a shared
// machine is only as steady as its load: the load average is printed and recorded.
'use strict';

const { execFileSync, fork } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const results = require('./report');
const { startRedis } = require('./redis-server');

const SECONDS = Number(process.env.BENCH_SECONDS || 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const PROCESSES = Number(process.env.BENCH_PROCESSES || 4);
const IN_FLIGHT = 64;
const KEY = 'the-hot-key';
const root = path.resolve(__dirname, '..', '..');

/** A child: runs `which` against the server at `port` for SECONDS; sends its check count. */
async function child(which, port) {
  let check;
  let close = async () => {};
  if (which === 'rate-limiter-flexible') {
    const Redis = require('ioredis');
    const { RateLimiterRedis } = require('rate-limiter-flexible');
    const ioredis = new Redis({ host: '127.0.0.1', port });
    await ioredis.ping();
    const rlf = new RateLimiterRedis({ storeClient: ioredis, points: 1e12, duration: 1, keyPrefix: 'rlf' });
    check = () => rlf.consume(KEY);
    close = () => ioredis.quit();
  } else {
    const rk = require(path.join(root, 'node'));
    const backend = rk.Backend.redis(`redis://127.0.0.1:${port}`, { deadlineMs: 5000 });
    const limiter = which === 'ratekeeper bucket' ? backend.bucket('hot', 1e12, '1s') : backend.tokenBucket('hot', 1e6, 1e12);
    check = () => limiter.check(KEY);
  }
  await check();
  process.send({ ready: true });
  await new Promise((resolve) => process.once('message', resolve));
  let done = 0;
  const end = process.hrtime.bigint() + BigInt(Math.round(SECONDS * 1e9));
  async function loop() {
    while (process.hrtime.bigint() < end) {
      for (let i = 0; i < 64; i++) {
        const d = await check();
        if (d.allowed === false) throw new Error('a check was refused: the limits are meant to be far above the load');
        done++;
      }
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop));
  await close();
  process.send({ done });
}

/** User and system CPU seconds of process `pid` (what redis-server spends on everything: I/O,
 * parsing, scripts). */
function cpuSeconds(pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

function info(port) {
  const out = execFileSync('redis-cli', ['-p', String(port), 'info', 'commandstats'], { encoding: 'utf8' });
  const m = out.match(/cmdstat_evalsha:calls=(\d+),usec=(\d+)/);
  return m ? Number(m[2]) : 0;
}

/** One round of `which`: checks/s over every process, and server µs per check. */
async function round(which, { port, pid }) {
  const children = Array.from({ length: PROCESSES }, () => fork(__filename, ['child', which, String(port)]));
  for (const c of children) {
    c.once('exit', (code) => {
      if (code !== 0) {
        console.error(`a ${which} process failed (exit ${code})`);
        process.exit(1);
      }
    });
  }
  await Promise.all(children.map((c) => new Promise((resolve) => c.once('message', resolve))));
  execFileSync('redis-cli', ['-p', String(port), 'config', 'resetstat']);
  const cpuBefore = cpuSeconds(pid);
  const start = process.hrtime.bigint();
  const counts = children.map((c) => new Promise((resolve) => c.once('message', (m) => resolve(m.done))));
  for (const c of children) c.send('go');
  const done = (await Promise.all(counts)).reduce((a, b) => a + b, 0);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = cpuSeconds(pid) - cpuBefore;
  const usec = info(port);
  return { rate: done / seconds, usecPerCheck: usec / done, cpuPerCheck: (cpu * 1e6) / done };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  if (!process.env.BENCH_NO_BUILD) execFileSync(process.execPath, [path.join(root, 'node', 'scripts', 'build.js')], { stdio: 'inherit' });
  const redis = await startRedis();
  const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');
  const rlfVersion = require('rate-limiter-flexible/package.json').version;
  const loadBefore = load();
  console.log(`node ${process.version}, ${os.cpus().length} CPUs, load average ${loadBefore}`);
  console.log(`${PROCESSES} processes × ${IN_FLIGHT} in flight on one key; ${ROUNDS} rounds of ${SECONDS}s, median\n`);
  const names = ['ratekeeper token bucket', 'ratekeeper bucket', 'rate-limiter-flexible'];
  const got = Object.fromEntries(names.map((n) => [n, []]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const name of names) got[name].push(await round(name, redis));
  }
  const loadAfter = load();
  const med = (name, field) => median(got[name].map((x) => x[field]));
  const peer = 'rate-limiter-flexible';
  const rows = [];
  console.log('| checks on one key | checks/s | script µs per check (commandstats) | redis-server CPU µs per check | ceiling per primary (1 / CPU µs) | ÷ rate-limiter-flexible (checks/s) |');
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const name of names) {
    const rate = med(name, 'rate');
    const usec = med(name, 'usecPerCheck');
    const cpu = med(name, 'cpuPerCheck');
    console.log(`| ${name} | ${Math.round(rate)} | ${usec.toFixed(2)} | ${cpu.toFixed(2)} | ${Math.round(1e6 / cpu)} | ${(rate / med(peer, 'rate')).toFixed(2)} |`);
    if (name !== peer) {
      rows.push(results.row(`one hot key, ${PROCESSES} processes × ${IN_FLIGHT} in flight: ${name}`, rate, peer, med(peer, 'rate'), { target: 1.2 }));
      rows.push(results.row(`one hot key: ${name}, script µs per check (commandstats; a batch counted per check)`, usec, peer, med(peer, 'usecPerCheck'), { unit: 'server µs per check', higherIsBetter: false }));
      rows.push(results.row(`one hot key: ${name}, redis-server CPU per check (ceiling per primary: 1 / this)`, cpu, peer, med(peer, 'cpuPerCheck'), { unit: 'CPU µs per check', higherIsBetter: false }));
    }
  }
  console.log(`\nload average after: ${loadAfter}`);
  results.write('bench-hot-key', 'Node', `One hot key: ${PROCESSES} processes × ${IN_FLIGHT} in flight, against rate-limiter-flexible ${rlfVersion}`,
    'node bench/node/hot-key.js', `median of ${ROUNDS} alternating rounds of ${SECONDS} s; node ${process.version}; load average before ${loadBefore}, after ${loadAfter} (a shared 2-CPU machine: throughput taken on a loaded machine)`, rows);
  redis.stop();
  process.exit(0);
}

if (process.argv[2] === 'child') {
  child(process.argv[3], Number(process.argv[4])).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
