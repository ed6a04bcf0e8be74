// The redis-server a Node benchmark runs against: on a free loopback port (never 6379), with no
// persistence, killed when the process exits.
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => (port === 6379 ? freePort().then(resolve) : resolve(port)));
    });
  });
}

async function startRedis() {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratekeeper-bench-node-'));
  const bin = fs.existsSync('/usr/bin/redis-server') ? '/usr/bin/redis-server' : 'redis-server';
  const child = spawn(bin, ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no'], {
    cwd: dir,
    stdio: 'ignore',
  });
  for (let i = 0; i < 200; i++) {
    const up = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), resolve(true)));
      s.once('error', () => resolve(false));
    });
    if (up) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  const stop = () => {
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {}
    fs.rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', stop);
  return { port, pid: child.pid, url: `redis://127.0.0.1:${port}`, stop };
}

module.exports = { startRedis };
