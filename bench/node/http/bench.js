#!/usr/bin/env node
// ratekeeper's HTTP middleware against each framework's usual rate-limit package, in one run,
// on one redis-server: Express (express-rate-limit + rate-limit-redis), Fastify
// (@fastify/rate-limit with its Redis store), Hono (hono-rate-limiter + @hono-rate-limiter/redis)
// and NestJS (@nestjs/throttler + @nest-lab/throttler-storage-redis), each also with no limiter
// (the floor). autocannon drives each server (app.js, its own process) for SECONDS with
// CONNECTIONS connections; each variant runs ROUNDS times, alternating, and the median round
// counts. Every request is admitted (limits far above the load): the figures are the cost of
// an admitted request. Not a test. Prints a table and writes bench/results/http-node.json.
//
//   cd bench/node && npm install && node http/bench.js     (builds node/ in release first;
//   BENCH_NO_BUILD=1 uses the addon already built)
'use strict';

const { execFileSync, spawn } = require('node:child_process');
const path = require('node:path');
const results = require('../report');
const { startRedis } = require('../redis-server');
const autocannon = require('autocannon');

const SECONDS = Number(process.env.BENCH_SECONDS || 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS || 32);
const ONLY = process.env.BENCH_ONLY || '';
const root = path.resolve(__dirname, '..', '..', '..');
const PEERS = {
  express: 'express-rate-limit + rate-limit-redis',
  fastify: '@fastify/rate-limit (Redis store)',
  hono: 'hono-rate-limiter + @hono-rate-limiter/redis',
  nestjs: '@nestjs/throttler + @nest-lab/throttler-storage-redis',
};

function startApp(framework, variant, redisUrl) {
  const child = spawn(process.execPath, [path.join(__dirname, 'app.js')], {
    env: { ...process.env, FRAMEWORK: framework, VARIANT: variant, REDIS_URL: redisUrl },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (\d+)/.exec(out);
      if (m) resolve({ port: Number(m[1]), stop: () => new Promise((r) => (child.once('exit', r), child.kill('SIGTERM'))) });
    });
    child.once('exit', (code) => reject(new Error(`${framework}/${variant} exited with ${code}`)));
  });
}

async function load(port, what, seconds = SECONDS) {
  const result = await autocannon({ url: `http://127.0.0.1:${port}/`, connections: CONNECTIONS, duration: seconds });
  if (result.non2xx > 0 || result.errors > 0) {
    const statuses = Object.entries(result.statusCodeStats ?? {}).map(([s, { count }]) => `${s}: ${count}`).join(', ');
    throw new Error(`${what}: ${result.non2xx} non-2xx (${statuses}), ${result.errors} errors: every request must be admitted`);
  }
  return result.requests.average;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n) => `${(n / 1000).toFixed(1)}k`;

async function main() {
  if (!process.env.BENCH_NO_BUILD) {
    console.log('building node/ in release …');
    execFileSync(process.execPath, [path.join(root, 'node', 'scripts', 'build.js')], { stdio: 'inherit' });
  }
  const redis = await startRedis();
  const redisUrl = `redis://127.0.0.1:${redis.port}`;
  const rows = [];
  try {
    for (const framework of Object.keys(PEERS)) {
      if (ONLY && !framework.includes(ONLY)) continue;
      const samples = { floor: [], ratekeeper: [], peer: [] };
      for (let round = 0; round < ROUNDS; round++) {
        for (const variant of Object.keys(samples)) {
          const app = await startApp(framework, variant, redisUrl);
          try {
            await load(app.port, `${framework}/${variant}`, 2); // warm-up (2 s): connections, JIT, scripts loaded
            samples[variant].push(await load(app.port, `${framework}/${variant}`));
          } finally {
            await app.stop();
          }
        }
      }
      const [floor, ours, peer] = ['floor', 'ratekeeper', 'peer'].map((v) => median(samples[v]));
      const row = {
        framework,
        peer: PEERS[framework],
        floor_rps: Math.round(floor),
        ratekeeper_rps: Math.round(ours),
        peer_rps: Math.round(peer),
        ratio_to_peer: Number((ours / peer).toFixed(2)),
        ratekeeper_overhead_over_floor: Number((1 - ours / floor).toFixed(3)),
        peer_overhead_over_floor: Number((1 - peer / floor).toFixed(3)),
        samples,
      };
      rows.push(row);
      console.log(
        `${framework.padEnd(8)} floor ${fmt(floor).padStart(7)}  ratekeeper ${fmt(ours).padStart(7)} (-${(row.ratekeeper_overhead_over_floor * 100).toFixed(1)}%)` +
          `  ${PEERS[framework]} ${fmt(peer).padStart(7)} (-${(row.peer_overhead_over_floor * 100).toFixed(1)}%)  ratio ${row.ratio_to_peer.toFixed(2)}x`,
      );
    }
  } finally {
    redis.stop();
  }
  const out = path.join(results.RESULTS, 'http-node.json');
  const table = rows.flatMap((r) => [
    results.row(`${r.framework}, against the peer`, r.ratekeeper_rps, r.peer, r.peer_rps, { unit: 'requests/s', target: 1.0 }),
    results.row(`${r.framework}, against the same app with no limiter`, r.ratekeeper_rps, 'no limiter (floor)', r.floor_rps, { unit: 'requests/s' }),
  ]);
  results.write('http-node', 'HTTP middleware', "Node HTTP middleware against each framework's rate-limit package", 'node bench/node/http/bench.js',
    `requests/s of one app per framework under autocannon ${require('autocannon/package.json').version}, ${CONNECTIONS} connections, ` +
      `${ROUNDS} rounds of ${SECONDS} s, medians; every request admitted; node ${process.version}`, table, { details: rows });
  console.log(`wrote ${path.relative(root, out)}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
