// A Node process of the soak (tests/soak/soak.py): the same loop as worker.py, on the formats of
// tests/soak/config.py. Usage: node worker.js PACKAGE_DIR CONFIG
'use strict';

const fs = require('node:fs');
const { performance } = require('node:perf_hooks');

const [packageDir, configPath] = process.argv.slice(2);
const { Backend } = require(packageDir);

function readConfig(path) {
  const config = { limiters: [] };
  for (const line of fs.readFileSync(path, 'utf8').split('\n')) {
    if (!line) continue;
    const [name, ...rest] = line.split(' ');
    if (name === 'limiter') config.limiters.push({ name: rest[0], maxCost: Number(rest[1]), spec: rest[2] });
    else config[name] = rest;
  }
  return config;
}

/** A small seeded generator (mulberry32), so a run's choices can be replayed. */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
/** The judge's name for an error (`ERR_BACKEND_UNAVAILABLE` -> `BackendUnavailable`). */
const errorName = (e) =>
  typeof e.code === 'string' && e.code.startsWith('ERR_')
    ? e.code.slice(4).toLowerCase().replace(/(^|_)([a-z])/g, (_, __, c) => c.toUpperCase())
    : `Unexpected(${String(e.message).replace(/\s+/g, '_').slice(0, 60)})`;

async function main() {
  const config = readConfig(configPath);
  const deadline = Number(config.deadline[0]);
  const backend = Backend.cluster(config.seeds, {
    prefix: config.prefix[0],
    failurePolicy: 'fail_closed',
    deadlineMs: deadline * 1000,
    connectTimeoutMs: deadline * 5000,
  });
  const limiters = new Map(config.limiters.map((l) => [l.name, { conf: l, limiter: backend.limiter(l.name, l.spec) }]));
  const out = fs.openSync(config.log[0], 'a');
  const log = (name, key, op, status, t0, dur, decided, cost, fencing) =>
    fs.writeSync(out, `${name} ${key} ${op} ${status} ${t0} ${dur} ${decided} ${cost} ${fencing}\n`);
  const rng = random(Number(config.seed[0]));
  const start = Number(config.start[0]) * 1000;
  const stop = Number(config.stop[0]) * 1000;
  const holdMs = Number(config.hold_ms[0]);
  // Connects to every master before the start (a peek on each limiter and key, not logged).
  for (const { limiter } of limiters.values()) {
    for (const key of config.keys) {
      while (Date.now() < start) {
        try {
          await limiter.peek(key);
          break;
        } catch {
          await sleep(50);
        }
      }
    }
  }
  await sleep(start - Date.now());

  const pairs = [];
  for (const name of limiters.keys()) for (const key of config.keys) pairs.push([name, key]);
  const pause = 1000 / Number(config.rate[0]);
  let nextAt = performance.now();
  while (Date.now() < stop) {
    for (let i = pairs.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [pairs[i], pairs[j]] = [pairs[j], pairs[i]];
    }
    for (const [name, key] of pairs) {
      if (Date.now() >= stop) break;
      const { conf, limiter } = limiters.get(name);
      const cost = 1 + Math.floor(rng() * conf.maxCost);
      let t0 = nowUs();
      let m0 = process.hrtime.bigint();
      let d = null;
      let status;
      try {
        d = await limiter.check(key, cost);
        status = d.allowed ? 'ok' : 'over';
      } catch (e) {
        status = errorName(e);
      }
      let dur = Number((process.hrtime.bigint() - m0) / 1000n);
      const lease = d && d.lease;
      log(name, key, 'c', status, t0, dur, lease ? lease.grantedAtUs : d ? d.decidedAtUs : 0, cost, lease ? lease.fencingToken : 0);
      if (lease) {
        await sleep(rng() * holdMs);
        t0 = nowUs();
        m0 = process.hrtime.bigint();
        try {
          await limiter.release(lease);
          status = 'ok';
        } catch (e) {
          status = errorName(e);
        }
        dur = Number((process.hrtime.bigint() - m0) / 1000n);
        log(name, key, 'r', status, t0, dur, 0, 0, lease.fencingToken);
      }
      nextAt = Math.max(nextAt + pause, performance.now());
      await sleep(nextAt - performance.now());
    }
  }
  fs.closeSync(out);
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
