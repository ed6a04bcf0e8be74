'use strict';
// Over-admission across processes: 8 Node processes hammer the same Redis limiters at once; the
// admissions, placed on the Redis server's clock by each decision's `decidedAtUs`, never exceed
// a limit: at most 50 in any 1 s span (window), per aligned second (bucket), and at most
// capacity + elapsed / emission interval (token bucket).

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { RedisServer } = require('./support/redis.js');

const PROCESSES = 8;
const DURATION_MS = 2500;

function runHammer(config) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'support', 'hammer.js'), JSON.stringify(config)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`hammer exited with ${code}`))));
  });
}

test(`${PROCESSES} processes never over-admit (judged by the server's decision times)`, async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  const config = { url: server.url, startAt: Date.now() + 1500, durationMs: DURATION_MS, concurrency: 4, prefix: `oa${process.pid}` };
  const results = await Promise.all(Array.from({ length: PROCESSES }, () => runHammer(config)));

  const all = (name) => results.flatMap((r) => r.admitted[name]).sort((a, b) => a - b);
  const refusedTotal = (name) => results.reduce((n, r) => n + r.refused[name], 0);
  const perProcess = (name) => results.map((r) => r.admitted[name].length);

  // window: at most 50 admissions in any span of 1 s: t[i + 50] - t[i] >= 1 s.
  const window = all('window');
  for (let i = 0; i + 50 < window.length; i++) {
    assert.ok(window[i + 50] - window[i] >= 1_000_000, `51 window admissions within ${window[i + 50] - window[i]} us`);
  }
  // bucket: at most 50 per aligned second.
  const perSecond = new Map();
  for (const us of all('bucket')) perSecond.set(Math.floor(us / 1e6), (perSecond.get(Math.floor(us / 1e6)) ?? 0) + 1);
  for (const [second, n] of perSecond) assert.ok(n <= 50, `${n} bucket admissions in second ${second}`);
  // token bucket (50/s, burst 10): any j - i + 1 admissions span at least (j - i + 1 - 10) * 20 ms.
  const tokens = all('tokenBucket');
  for (let i = 0; i < tokens.length; i++) {
    for (let j = i + 10; j < tokens.length; j++) {
      const allowed = 10 + Math.floor((tokens[j] - tokens[i]) / 20_000);
      assert.ok(j - i + 1 <= allowed, `${j - i + 1} token admissions within ${tokens[j] - tokens[i]} us`);
    }
  }
  // The limits were contended, by every process, and filled.
  const seconds = DURATION_MS / 1000;
  for (const name of ['window', 'bucket', 'tokenBucket']) {
    assert.ok(refusedTotal(name) > 100, `${name}: too few refusals to judge (${refusedTotal(name)})`);
    assert.ok(perProcess(name).filter((n) => n > 0).length >= PROCESSES / 2, `${name}: admissions per process ${perProcess(name)}`);
  }
  assert.ok(window.length >= 50 * Math.floor(seconds), `window admitted only ${window.length}`);
  assert.ok(tokens.length >= 50 * seconds * 0.8, `token bucket admitted only ${tokens.length}`);
  console.log(
    `admitted over ${seconds}s by ${PROCESSES} processes: window ${window.length}, bucket ${all('bucket').length}, ` +
      `token bucket ${tokens.length}; refused ${refusedTotal('window') + refusedTotal('bucket') + refusedTotal('tokenBucket')}`,
  );
});
