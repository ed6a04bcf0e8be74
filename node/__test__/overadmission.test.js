'use strict';
// Over-admission across processes: 8 Node processes hammer the same Redis limiters at once; the
// admissions, placed on the Redis server's clock by each decision's `decidedAtUs`, never exceed
// a limit: at most 50 in any 1 s span (window), per aligned second (bucket), and at most
// capacity + elapsed / emission interval (token bucket).

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { RedisServer, judge } = require('./support/redis.js');

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

  // The judge every suite shares, over every span: window, at most 50 admissions in any span
  // of 1 s; bucket, at most 50 per aligned second; token bucket (50/s, burst 10), any run of
  // admissions at most 10 + elapsed / 20 ms.
  const window = all('window');
  const tokens = all('tokenBucket');
  const ones = (instants) => instants.map((us) => [us, 1]);
  const verdicts = await judge([
    { rule: { rule: 'span', limit: 50, interval_us: 1_000_000 }, admitted: ones(window) },
    { rule: { rule: 'blocks', limit: 50, block_us: 1_000_000, blocks: 1 }, admitted: ones(all('bucket')) },
    { rule: { rule: 'rate', capacity: 10, emission_us: 20_000 }, admitted: ones(tokens) },
  ]);
  assert.deepEqual(verdicts, [null, null, null], 'over-admission (window, bucket, token bucket)');
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

test('the shared judge names an excess of each rule (so the test above can fail)', async () => {
  const burst = (n, at) => Array.from({ length: n }, (_, i) => [at + i, 1]);
  const [span, blocks, rate] = await judge([
    { rule: { rule: 'span', limit: 50, interval_us: 1_000_000 }, admitted: [...burst(50, 0), [999_999, 1]] },
    { rule: { rule: 'blocks', limit: 50, block_us: 1_000_000, blocks: 1 }, admitted: burst(51, 1_000_000) },
    { rule: { rule: 'rate', capacity: 10, emission_us: 20_000 }, admitted: [...burst(10, 0), [19_999, 1]] },
  ]);
  assert.match(span, /51 admitted/);
  assert.match(blocks, /51 admitted/);
  assert.match(rate, /units were charged/);
  const [exactlyOnTime] = await judge([
    { rule: { rule: 'span', limit: 50, interval_us: 1_000_000 }, admitted: [...burst(50, 0), [1_000_000, 1]] },
  ]);
  assert.equal(exactlyOnTime, null);
});
