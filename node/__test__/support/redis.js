'use strict';
// Real Redis servers for the tests: started on free loopback ports (never 6379), each in its
// own temporary directory, stopped by pid. The servers are the fixture every suite shares
// (`rk-test-redis`, the binary of the workspace's `test-support` crate); this module keeps the
// Node API over it. No mocks.

const { execFile, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { promisify } = require('node:util');

const REDIS_CLI = fs.existsSync('/usr/bin/redis-cli') ? '/usr/bin/redis-cli' : 'redis-cli';
const REPO = path.resolve(__dirname, '..', '..', '..');

/**
 * The shared fixture's binary: `RK_TEST_REDIS` (the test scripts set it), else the debug build
 * in the workspace's target directory, built on first use.
 */
function rkTestRedisPath() {
  if (process.env.RK_TEST_REDIS) return process.env.RK_TEST_REDIS;
  const built = path.join(REPO, 'target', 'debug', 'rk-test-redis');
  if (!fs.existsSync(built)) {
    execFileSync('cargo', ['build', '--quiet', '-p', 'ratekeeper-test-support', '--bin', 'rk-test-redis'], {
      cwd: REPO,
      stdio: 'inherit',
    });
  }
  return built;
}

/** Runs `rk-test-redis ...args` (with `input` on stdin) and resolves to its output. */
function rkTestRedis(args, input) {
  return new Promise((resolve, reject) => {
    const child = execFile(rkTestRedisPath(), args, { maxBuffer: 256 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`rk-test-redis ${args.join(' ')} failed: ${stderr.trim() || error.message}`));
      else resolve(stdout);
    });
    // A command that reads no input may have exited before the write: its exit status, not the
    // closed pipe (EPIPE, an uncaught error otherwise), is the answer.
    child.stdin.on('error', (error) => {
      if (error.code !== 'EPIPE') reject(error);
    });
    child.stdin.end(input ?? '');
  });
}

async function startServers(args) {
  return JSON.parse(await rkTestRedis(['start', '--json', ...args])).servers;
}

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
  /** `info`: one server as `rk-test-redis start --json` prints it. */
  constructor(info) {
    this.adopt(info);
  }

  adopt(info) {
    this.port = info.port;
    this.dir = info.dir;
    this.args = info.args;
    this.ca = info.ca;
    this.runningPid = info.pid;
    running.add(info.pid);
  }

  /** A standalone server (`extra`: more redis-server arguments). */
  static async start(extra = []) {
    const [info] = await startServers(['--', ...extra]);
    return new RedisServer(info);
  }

  /**
   * A server speaking only TLS, with certificates made by openssl in a temporary directory
   * (removed after `t`); `ca`: the CA certificate a client trusts. Stop it with `destroy`.
   */
  static async startTlsWithCa(t) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratekeeper-node-tls-'));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const openssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
    openssl('genrsa', '-out', 'ca.key', '2048');
    openssl('req', '-x509', '-new', '-nodes', '-key', 'ca.key', '-sha256', '-days', '2', '-subj', '/CN=ratekeeper node test CA', '-out', 'ca.crt');
    openssl('genrsa', '-out', 'server.key', '2048');
    openssl('req', '-new', '-key', 'server.key', '-subj', '/CN=127.0.0.1', '-out', 'server.csr');
    fs.writeFileSync(path.join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
    openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2', '-sha256', '-extfile', 'san.ext', '-out', 'server.crt');
    const server = await RedisServer.startTls(dir);
    return { server, ca: fs.readFileSync(path.join(dir, 'ca.crt')) };
  }

  /** A server speaking only TLS, with the certificates in `certs` (ca.crt, server.crt/.key). */
  static async startTls(certs) {
    const [info] = await startServers(['--tls-certs', certs]);
    return new RedisServer(info);
  }

  /** Starts the stopped server again, on its port, with its arguments. */
  async launch() {
    const [info] = JSON.parse(await rkTestRedis(['launch', '--json', '--dir', this.dir, '--', ...this.args])).servers;
    this.adopt(info);
  }

  get pid() {
    return this.runningPid;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  cli(...args) {
    return execFileSync(REDIS_CLI, ['-h', '127.0.0.1', '-p', String(this.port), ...args], { encoding: 'utf8' }).trim();
  }

  /** Stops the server by pid (SIGKILL) and waits for it to exit; its directory stays. */
  async stop() {
    const pid = this.runningPid;
    if (pid === null) return;
    this.runningPid = null;
    await rkTestRedis(['stop', '--keep-dir', String(pid)]);
    running.delete(pid);
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
    return new RedisCluster((await startServers(['--cluster'])).map((info) => new RedisServer(info)));
  }

  get seeds() {
    return this.nodes.map((n) => n.url);
  }

  async destroy() {
    await Promise.all(this.nodes.map((n) => n.destroy()));
  }
}

/**
 * Judges admissions with the over-admission judge every suite shares (`rk-test-redis judge`):
 * `cases` are `{ rule, admitted: [[serverTimeUs, cost], ...] }`, with `rule` one of
 * `{ rule: 'span', limit, interval_us }` (any span of the interval), `{ rule: 'blocks', limit,
 * block_us, blocks }` (aligned blocks) or `{ rule: 'rate', capacity, emission_us }` (token
 * bucket). Resolves to one verdict per case: null, or the first excess found.
 */
async function judge(cases) {
  return JSON.parse(await rkTestRedis(['judge'], JSON.stringify(cases)));
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

/**
 * A Sentinel group (`rk-test-redis start --sentinel`): a primary and two replicas (`nodes`, the
 * primary first) and three sentinels watching them as `service`, down-after 1 s.
 */
class RedisSentinelGroup {
  constructor(servers) {
    const sentinel = (info) => info.args.includes('--sentinel');
    this.nodes = servers.filter((s) => !sentinel(s)).map((info) => new RedisServer(info));
    this.sentinels = servers.filter(sentinel).map((info) => new RedisServer(info));
    this.service = 'rkprimary';
  }

  static async start() {
    return new RedisSentinelGroup(await startServers(['--sentinel']));
  }

  get addresses() {
    return this.sentinels.map((s) => `127.0.0.1:${s.port}`);
  }

  /** The primary's port as the first running sentinel names it (`null`: none answers). */
  primaryPort() {
    for (const s of this.sentinels.filter((s) => s.pid !== null)) {
      const [, port] = s.cli('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.service).split('\n');
      if (port) return Number(port);
    }
    return null;
  }

  async destroy() {
    for (const s of [...this.nodes, ...this.sentinels]) await s.destroy();
  }
}

module.exports = { RedisServer, RedisCluster, RedisSentinelGroup, freePort, waitUntil, watchdog, judge };
