'use strict';
// Real Redis servers for the tests: started on free loopback ports (never 6379), each in its
// own temporary directory, stopped by pid. No mocks.

const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const REDIS_SERVER = fs.existsSync('/usr/bin/redis-server') ? '/usr/bin/redis-server' : 'redis-server';
const REDIS_CLI = fs.existsSync('/usr/bin/redis-cli') ? '/usr/bin/redis-cli' : 'redis-cli';

function canListen(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A port nobody listens on, with its cluster bus port (+10000) free too; never 6379. */
async function freePort() {
  for (;;) {
    const port = await new Promise((resolve, reject) => {
      const server = net.createServer();
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const { port } = server.address();
        server.close(() => resolve(port));
      });
    });
    if (port !== 6379 && port < 55000 && (await canListen(port + 10000))) return port;
  }
}

function connects(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function waitUntil(what, timeoutMs, ready) {
  const deadline = Date.now() + timeoutMs;
  while (!(await ready())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Every server started by this process, stopped on exit even if a test forgot. */
const running = new Set();
process.on('exit', () => {
  for (const pid of running) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
});

class RedisServer {
  constructor(port, dir, args) {
    this.port = port;
    this.dir = dir;
    this.args = args;
    this.child = null;
  }

  /** A standalone server (`extra`: more redis-server arguments). */
  static async start(extra = [], label = 'standalone') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `ratekeeper-node-${label}-`));
    const port = await freePort();
    const args = ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no',
      '--protected-mode', 'no', ...extra];
    const server = new RedisServer(port, dir, args);
    await server.launchOnFreePort();
    return server;
  }

  /** A server speaking only TLS, with the certificates in `certs` (ca.crt, server.crt/.key). */
  static async startTls(certs) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratekeeper-node-tls-'));
    const port = await freePort();
    const args = ['--bind', '127.0.0.1', '--port', '0', '--tls-port', String(port), '--save', '', '--appendonly', 'no',
      '--protected-mode', 'no', '--tls-cert-file', path.join(certs, 'server.crt'),
      '--tls-key-file', path.join(certs, 'server.key'), '--tls-ca-cert-file', path.join(certs, 'ca.crt'),
      '--tls-auth-clients', 'no'];
    const server = new RedisServer(port, dir, args);
    await server.launchOnFreePort();
    return server;
  }

  /**
   * `launch`, moving to another free port while the chosen one turns out to belong to another
   * server (test files run in parallel processes and may pick the same free port at once: ours
   * then fails to bind while theirs answers).
   */
  async launchOnFreePort() {
    for (let attempt = 0; attempt < 20; attempt++) {
      await this.launch();
      if (this.owns(this.port)) return;
      await this.stop();
      const old = String(this.port);
      this.port = await freePort();
      this.args = this.args.map((a) => (a === old ? String(this.port) : a));
    }
    throw new Error(`could not start redis-server on a free port (see ${this.dir}/redis.log)`);
  }

  /** Whether the server answering on `port` is this process. */
  owns(port) {
    if (this.child === null || this.child.exitCode !== null) return false;
    if (this.args.includes('--tls-port')) return true; // redis-cli would need TLS: trust the exit code
    try {
      return this.cli('INFO', 'server').split(/\r?\n/).some((l) => l.trim() === `process_id:${this.pid}`);
    } catch {
      return false;
    }
  }

  async launch() {
    const log = fs.openSync(path.join(this.dir, 'redis.log'), 'a');
    this.child = spawn(REDIS_SERVER, this.args, { cwd: this.dir, stdio: ['ignore', log, log] });
    fs.closeSync(log);
    running.add(this.child.pid);
    this.child.once('exit', () => running.delete(this.child && this.child.pid));
    await waitUntil(`redis-server on port ${this.port}`, 10000, () => connects(this.port));
  }

  get pid() {
    return this.child.pid;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  cli(...args) {
    return execFileSync(REDIS_CLI, ['-h', '127.0.0.1', '-p', String(this.port), ...args], { encoding: 'utf8' }).trim();
  }

  /** Stops the server by pid (SIGKILL) and waits for it to exit. */
  async stop() {
    const child = this.child;
    if (!child) return;
    this.child = null;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      process.kill(child.pid, 'SIGKILL');
      await exited;
    }
    running.delete(child.pid);
  }

  async destroy() {
    await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A Redis Cluster of three masters built with `redis-cli --cluster create`. */
class RedisCluster {
  constructor(nodes) {
    this.nodes = nodes;
  }

  static async start() {
    const extra = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'];
    const nodes = [];
    for (let i = 0; i < 3; i++) nodes.push(await RedisServer.start(extra, 'cluster'));
    execFileSync(REDIS_CLI, ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas', '0', '--cluster-yes'], { encoding: 'utf8' });
    await waitUntil('cluster_state:ok on every node', 20000, () =>
      nodes.every((n) => n.cli('CLUSTER', 'INFO').includes('cluster_state:ok')));
    return new RedisCluster(nodes);
  }

  get seeds() {
    return this.nodes.map((n) => n.url);
  }

  async destroy() {
    await Promise.all(this.nodes.map((n) => n.destroy()));
  }
}

/**
 * A deferred event for ordering assertions: `action` runs after `ms` unless stopped first. A test
 * asserts that something happened before it (e.g. calls against a SIGSTOPped server settled
 * before the watchdog resumed it). `ms` bounds nothing measured; it only has to be long enough
 * for the ordering to mean something.
 */
function watchdog(ms, action) {
  let fired = false;
  const timer = setTimeout(() => {
    fired = true;
    action();
  }, ms);
  return {
    get fired() {
      return fired;
    },
    /** Cancels the action if it has not run; returns whether it had. */
    stop() {
      clearTimeout(timer);
      return fired;
    },
  };
}

module.exports = { RedisServer, RedisCluster, freePort, waitUntil, watchdog };
