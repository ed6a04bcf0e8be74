// What the Node Redis benchmarks share besides the server (redis-server.js): the command a
// call sends (its exact bytes), the floor client that runs it, and pinning processes to CPUs.
'use strict';

const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

/** The EVALSHA `call()` sends, captured with MONITOR: its arguments as the exact bytes (Buffers). */
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
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => unescapeMonitor(m[1]));
}

// MONITOR's escapes (Redis's sdscatrepr): every byte outside printable ASCII is \xHH.
const ESCAPES = { n: 0x0a, r: 0x0d, t: 0x09, a: 0x07, b: 0x08 };

/** One argument as MONITOR quotes it, back to its bytes. */
function unescapeMonitor(quoted) {
  const bytes = [];
  for (let i = 0; i < quoted.length; i++) {
    if (quoted[i] !== '\\') {
      bytes.push(quoted.charCodeAt(i));
    } else if (quoted[i + 1] === 'x') {
      bytes.push(parseInt(quoted.slice(i + 2, i + 4), 16));
      i += 3;
    } else {
      const c = quoted[++i];
      bytes.push(ESCAPES[c] ?? c.charCodeAt(0));
    }
  }
  return Buffer.from(bytes);
}

/** `command` (Buffers or strings) as one RESP request. */
function resp(command) {
  return Buffer.concat(
    [Buffer.from(`*${command.length}\r\n`)].concat(
      command.flatMap((arg) => [Buffer.from(`$${Buffer.byteLength(arg)}\r\n`), Buffer.from(arg), Buffer.from('\r\n')]),
    ),
  );
}

/** A node:net connection that sends `command` and resolves with each whole reply (a script's
 * reply: an array of integers, or one line): what any Node client pays for a round trip (the
 * runtime and its event loop) with no client library, parser or Promise chain of its own. */
async function bareSocket(port, command) {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.setNoDelay(true);
  const request = resp(command);
  let pending = null;
  let input = '';
  socket.on('data', (chunk) => {
    input += chunk.toString('latin1');
    const lines = input.split('\r\n').length - 1;
    const whole = input.startsWith('*') ? lines >= Number(input.slice(1, input.indexOf('\r\n'))) + 1 : lines >= 1;
    if (whole) {
      input = '';
      const done = pending;
      pending = null;
      done();
    }
  });
  return {
    send: () => new Promise((resolve) => ((pending = resolve), socket.write(request))),
    close: () => socket.destroy(),
  };
}

let floorClientBinary = null;

/**
 * The floor client for `command`, sending it `n` times one at a time: [program, args, name].
 * redis-benchmark when it can take the command through argv; with a NUL byte in it (a spec
 * packed as MessagePack) bench/floor_client.c in its -e mode, which makes redis-benchmark's
 * system calls per request (built here with cc; it prints commands per second).
 */
function floorClient(port, command, n) {
  if (!command.some((arg) => Buffer.from(arg).includes(0))) {
    const args = ['-p', String(port), '-c', '1', '-n', String(n), '-q', ...command.map(String)];
    return ['redis-benchmark', args, 'redis-benchmark -c 1'];
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rk-bench-floor-'));
  if (!floorClientBinary) {
    floorClientBinary = path.join(dir, 'floor_client');
    const source = path.join(__dirname, '..', 'floor_client.c');
    execFileSync(process.env.CC || 'cc', ['-O2', '-o', floorClientBinary, source], { stdio: 'inherit' });
  }
  const file = path.join(dir, 'command.resp');
  fs.writeFileSync(file, resp(command));
  // -e: redis-benchmark's system calls per request (see the file), so it stands in for it.
  return [floorClientBinary, ['-e', String(port), String(n), file], 'floor_client.c -e -c 1'];
}

/** Commands per second in a floor client's output (redis-benchmark -q's, or floor_client's). */
function floorRate(output) {
  const rates = [...output.matchAll(/([\d.]+) requests per second/g)];
  return Number(rates.length > 0 ? rates.pop()[1] : output.trim());
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

module.exports = { bareSocket, capturedCommand, resp, floorClient, floorRate, pin, hasTaskset };
