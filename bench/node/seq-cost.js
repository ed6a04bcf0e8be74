#!/usr/bin/env node
// Where a sequential check's time goes, per client, on one redis-server: ratekeeper (Node, the
// driven connection), rate-limiter-flexible + ioredis, a bare node:net socket sending the
// EVALSHA ratekeeper sends (what any Node client pays: the runtime and its event loop, no
// client library), and the floor client sending it too (redis-benchmark -c 1, or floor_client.c when the command holds a NUL byte: the floor of bench.js). Not a test, and it writes no results file:
// it prints, per check, the client's checks/s, its CPU µs (every thread), its voluntary and
// involuntary context switches, the threads that ran besides the main one, and redis-server's
// CPU µs. Checks are counted by the server (INFO commandstats), the same way for every client.
//
//   cd bench/node && npm install && node seq-cost.js      (BENCH_NO_BUILD: as bench.js)
//
// SEQ_PLACEMENT: `free` (default: the scheduler places the processes), `cross` (client on CPU 1,
// redis-server on CPU 0) or `one` (both on CPU 0). Throughput is the one-at-a-time round trip;
// CPU µs and context switches are what the client pays per check, which a loaded machine
// disturbs less than throughput: a voluntary switch per check is a sleep and a wake-up.
'use strict';

const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startRedis } = require('./redis-server');
const { bareSocket, capturedCommand, floorClient, pin } = require('./redis-tools');

const SECONDS = Number(process.env.BENCH_SECONDS || 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const PLACEMENT = process.env.SEQ_PLACEMENT || 'free';
const CPUS = { free: [null, null], cross: ['1', '0'], one: ['0', '0'] }[PLACEMENT];
const KEYS = 1000;
const root = path.resolve(__dirname, '..', '..');

/** CPU ns, voluntary and involuntary switches of each thread of `pid`, by thread id. */
function threads(pid) {
  const out = new Map();
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const status = fs.readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      out.set(tid, {
        cpu: Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]),
        voluntary: Number(/\nvoluntary_ctxt_switches:\s+(\d+)/.exec(status)[1]),
        involuntary: Number(/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(status)[1]),
      });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return out;
}

/** Per check between two `threads` samples of `pid` (its main thread's id is `pid`). */
function perCheck(pid, before, after, checks) {
  const sum = { cpu: 0, voluntary: 0, involuntary: 0, others: 0 };
  for (const [tid, b] of after) {
    const a = before.get(tid) ?? { cpu: 0, voluntary: 0, involuntary: 0 };
    sum.cpu += (b.cpu - a.cpu) / 1e3 / checks;
    sum.voluntary += (b.voluntary - a.voluntary) / checks;
    sum.involuntary += (b.involuntary - a.involuntary) / checks;
    if (tid !== String(pid) && b.cpu > a.cpu) sum.others += 1;
  }
  return sum;
}

/** EVALSHA calls the server has run. */
async function evalshaCalls(admin) {
  const stats = await admin.info('commandstats');
  return Number(/cmdstat_evalsha:calls=(\d+)/.exec(stats)?.[1] ?? 0);
}

/** One measured stretch of `pid` doing checks for SECONDS (`run` starts and ends them). */
async function measure(admin, redis, pid, run) {
  const [c0, r0, t0] = [await evalshaCalls(admin), threads(redis.pid), process.hrtime.bigint()];
  const before = threads(pid);
  await run();
  const after = threads(pid);
  const [c1, r1, t1] = [await evalshaCalls(admin), threads(redis.pid), process.hrtime.bigint()];
  const checks = c1 - c0;
  return {
    rate: checks / (Number(t1 - t0) / 1e9),
    client: perCheck(pid, before, after, checks),
    server: perCheck(redis.pid, r0, r1, checks).cpu,
  };
}

/** Awaits `check(i)` one after another for SECONDS. */
async function sequential(check) {
  let done = 0;
  const end = process.hrtime.bigint() + BigInt(Math.round(SECONDS * 1e9));
  while (process.hrtime.bigint() < end) {
    for (let i = 0; i < 64; i++) await check(done++ % KEYS);
  }
}

/** The floor client (redis-benchmark -c 1, or floor_client.c for a command with a NUL byte: see
 * redis-tools.js) running `command` (on `cpu` if given), measured once it is going. */
async function redisBenchmark(admin, redis, command, cpu) {
  const [program, args] = floorClient(redis.port, command, 1000000000);
  const child = spawn(cpu ? 'taskset' : program, cpu ? ['-c', cpu, program, ...args] : args, { stdio: 'ignore' });
  await new Promise((resolve) => setTimeout(resolve, 300));
  // Under taskset the pid is the client's own (taskset execs it). floor_client sends from a
  // process it forks (one per connection): that one is measured.
  const forked = fs.existsSync(`/proc/${child.pid}/task/${child.pid}/children`)
    ? fs.readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)
    : [];
  const sender = forked.length === 1 ? Number(forked[0]) : child.pid;
  const result = await measure(admin, redis, sender, () => new Promise((resolve) => setTimeout(resolve, SECONDS * 1000)));
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
  return result;
}

async function main() {
  if (!process.env.BENCH_NO_BUILD) {
    execFileSync(process.execPath, [path.join(root, 'node', 'scripts', 'build.js')], { stdio: 'inherit' });
  }
  const rk = require(path.join(root, 'node'));
  const Redis = require('ioredis');
  const { RateLimiterRedis } = require('rate-limiter-flexible');
  const redis = await startRedis();
  const admin = new Redis({ host: '127.0.0.1', port: redis.port });
  const ioredis = new Redis({ host: '127.0.0.1', port: redis.port });
  const limiter = rk.Backend.redis(redis.url, { deadlineMs: 5000 }).tokenBucket('bench', 1e6, 1e9);
  const rlf = new RateLimiterRedis({ storeClient: ioredis, points: 1e12, duration: 1, keyPrefix: 'rlf' });
  const keys = Array.from({ length: KEYS }, (_, i) => `user-${i}`);
  await limiter.check('warm-up');
  await rlf.consume('warm-up');
  const evalsha = await capturedCommand(redis.port, () => limiter.check('captured'));
  const bare = await bareSocket(redis.port, evalsha);
  const [clientCpu, serverCpu] = CPUS;
  if (serverCpu) pin([redis.pid], serverCpu);
  if (clientCpu) pin([process.pid], clientCpu);
  console.log(`placement ${PLACEMENT}; node ${process.version}, ${os.cpus().length} CPUs, load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  const clients = {
    ratekeeper: () => measure(admin, redis, process.pid, () => sequential((i) => limiter.check(keys[i]))),
    'rate-limiter-flexible': () => measure(admin, redis, process.pid, () => sequential((i) => rlf.consume(keys[i]))),
    'node:net, the same EVALSHA': () => measure(admin, redis, process.pid, () => sequential(() => bare.send())),
    'floor client -c 1 (redis-benchmark, or floor_client.c for a NUL byte)': () => redisBenchmark(admin, redis, evalsha, clientCpu),
  };
  const rows = Object.fromEntries(Object.keys(clients).map((name) => [name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, run] of Object.entries(clients)) rows[name].push(await run());
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`load average after: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}; medians of ${ROUNDS} rounds of ${SECONDS} s\n`);
  console.log('| client | checks/s | client CPU µs / check | voluntary switches / check | involuntary / check | other threads that ran | redis-server CPU µs / check |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const [name, samples] of Object.entries(rows)) {
    const m = (f) => median(samples.map(f));
    console.log(
      `| ${name} | ${(m((s) => s.rate) / 1e3).toFixed(1)}k | ${m((s) => s.client.cpu).toFixed(2)} | ${m((s) => s.client.voluntary).toFixed(3)} | ` +
        `${m((s) => s.client.involuntary).toFixed(3)} | ${m((s) => s.client.others)} | ${m((s) => s.server).toFixed(2)} |`,
    );
  }
  bare.close();
  await Promise.all([admin.quit(), ioredis.quit()]);
  redis.stop();
  process.exit(0);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
