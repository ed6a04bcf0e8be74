// What the Node Redis benchmarks share besides the server (redis-server.js): the command a
// call sends, as redis-benchmark arguments, and pinning processes to CPUs.
'use strict';

const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');

/** The EVALSHA `call()` sends, captured with MONITOR, as redis-benchmark arguments. */
async function capturedCommand(port, call) {
  const cli = fs.existsSync('/usr/bin/redis-cli') ? '/usr/bin/redis-cli' : 'redis-cli';
  const monitor = spawn(cli, ['-p', String(port), 'monitor'], { stdio: ['ignore', 'pipe', 'ignore'] });
  let output = '';
  monitor.stdout.on('data', (chunk) => (output += chunk));
  while (!output.includes('OK')) await new Promise((r) => setTimeout(r, 10));
  await call();
  while (!/"EVALSHA"/i.test(output)) await new Promise((r) => setTimeout(r, 10));
  monitor.kill('SIGKILL');
  const line = output.split('\n').find((l) => /"EVALSHA"/i.test(l));
  // 1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "sha" "1" "key" ...
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1].replace(/\\(.)/g, '$1'));
}

/** Pins every thread of `pids` to `cpus` (a taskset list such as `0` or `0-1`). */
function pin(pids, cpus) {
  for (const pid of pids) execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
}

function hasTaskset() {
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

module.exports = { capturedCommand, pin, hasTaskset };
