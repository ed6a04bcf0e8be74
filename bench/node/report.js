// The JSON a Node benchmark run leaves in bench/results/ (the same shape as the Rust benches'
// bench/src/report.rs), from which bench/render.py renders the tables.
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const RESULTS = process.env.BENCH_RESULTS || path.resolve(__dirname, '..', 'results');

/** One scenario: ratekeeper's same-run median and, when there is one, the peer's. */
function row(scenario, ratekeeper, peer = null, peerValue = null, { unit = 'checks/s', target = null, headline = false, higherIsBetter = true } = {}) {
  // For a time (lower is better) the ratio is the peer's over ratekeeper's, as the Rust and
  // Python benches write it: above 1, ratekeeper is ahead either way.
  const ratio = peerValue ? Math.round((higherIsBetter ? ratekeeper / peerValue : peerValue / ratekeeper) * 1000) / 1000 : null;
  return {
    scenario,
    unit,
    ratekeeper,
    peer,
    peer_value: peerValue,
    ratio,
    target: target === null ? null : `≥ ${target.toFixed(2)}`,
    target_ratio: target,
    met: ratio === null || target === null ? null : ratio >= target,
    headline,
  };
}

/** Date, commit, load average and CPU count of this run. */
function machine() {
  let commit = null;
  try {
    commit = execFileSync('git', ['-C', RESULTS, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch {
    // not a git checkout: the commit stays unknown
  }
  const load = fs.readFileSync('/proc/loadavg', 'utf8').split(/\s+/).slice(0, 3).map(Number);
  return { date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), commit, load, cpus: os.cpus().length };
}

/** Writes bench/results/<bench>.json (and says where on stderr). */
function write(bench, area, title, command, method, rows, extra = {}) {
  fs.mkdirSync(RESULTS, { recursive: true });
  const quick = process.argv.includes('--quick') || Boolean(process.env.BENCH_QUICK);
  const doc = { bench, area, language: 'Node', title, command, method, quick, machine: machine(), rows, ...extra };
  const file = path.join(RESULTS, `${bench}.json`);
  fs.writeFileSync(file, `${JSON.stringify(doc, null, 2)}\n`);
  console.error(`results written to ${file}`);
}

module.exports = { RESULTS, row, write, machine };
