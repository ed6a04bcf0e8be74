'use strict';
// The first-hour table (tests/first_hour/cases.json) through the Node API: every case throws or
// rejects with the table's error code and a message holding the table's key words, so each
// error a new user meets says what was wrong and what to do. The same table runs through
// Python (py/tests/test_first_hour.py) and C (tests/first_hour/run_c.rb).

const test = require('node:test');
const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { Backend } = require('..');
const { RedisServer, freePort } = require('./support/redis.js');

const TABLE = JSON.parse(fs.readFileSync(path.resolve(__dirname, '..', '..', 'tests', 'first_hour', 'cases.json'), 'utf8'));
const CASES = TABLE.cases.filter((c) => (c.languages || ['node']).includes('node'));
const CODES = {
  invalid_argument: 'ERR_INVALID_ARGUMENT',
  backend_unavailable: 'ERR_BACKEND_UNAVAILABLE',
  module_not_found: 'MODULE_NOT_FOUND',
  exit_1: 'exit_1',
};
/** The table's option names (Python's and C's spelling) as the Node API spells them. */
const OPTIONS = { failure_policy: 'failurePolicy' };

/** `value` with every {placeholder} replaced, inside strings, arrays and objects. */
function fill(value, places) {
  if (typeof value === 'string') return value.replace(/\{(\w+)\}/g, (m, name) => places[name] ?? m);
  if (Array.isArray(value)) return value.map((v) => fill(v, places));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v, places)]));
  }
  return value;
}

/**
 * The main package alone, as `npm install ratekeeper-0.1.0.tgz` leaves it without its platform
 * package: its JavaScript files in a folder with no addon beside them and no node_modules above.
 * Returns what its first require threw.
 */
function withoutPlatformPackage(use) {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'ratekeeper-first-hour-'));
  try {
    const packageDir = path.join(folder, 'ratekeeper');
    fs.mkdirSync(path.join(packageDir, 'bin'), { recursive: true });
    const root = path.resolve(__dirname, '..');
    for (const file of ['package.json', 'index.js', 'addon.js', 'addon-path.js', 'http.js', 'bin/ratekeeper.js']) {
      fs.copyFileSync(path.join(root, file), path.join(packageDir, file));
    }
    return use(folder, packageDir);
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
}

/** What the first require of the package alone threw. */
function requireWithoutPlatformPackage() {
  return withoutPlatformPackage((folder, packageDir) => {
    const script = `try { require(${JSON.stringify(packageDir)}); process.exit(3); } catch (e) {
      process.stdout.write(JSON.stringify({ code: e.code, message: e.message })); }`;
    const out = childProcess.execFileSync(process.execPath, ['-e', script], { cwd: folder, encoding: 'utf8' });
    return JSON.parse(out);
  });
}

/** `npx ratekeeper --version` with the package alone: its exit code (as `exit_N`) and stderr. */
function cliWithoutPlatformPackage() {
  return withoutPlatformPackage((folder, packageDir) => {
    const run = childProcess.spawnSync(process.execPath, [path.join(packageDir, 'bin', 'ratekeeper.js'), '--version'], {
      cwd: folder,
      encoding: 'utf8',
    });
    return { code: `exit_${run.status}`, message: run.stderr };
  });
}

let prefixes = 0;
async function run(c) {
  switch (c.call) {
    case 'check_redis': {
      const backend = Backend.redis(c.url, { deadlineMs: 5000 });
      await backend.limiter(c.name, c.spec).check();
      return;
    }
    case 'new_redis': {
      const options = c.option ? { [OPTIONS[c.option] ?? c.option]: c.value } : undefined;
      Backend.redis(c.url, options);
      return;
    }
    case 'new_limiter':
      Backend.memory().limiter(c.name, c.spec);
      return;
    case 'set_limit_other_kind': {
      const backend = Backend.redis(c.url, { deadlineMs: 5000, prefix: `node${process.pid}x${prefixes++}` });
      const limiter = backend.limiter(c.name, c.spec);
      await limiter.check();
      await backend.flush();
      await backend.setLimit(c.name, c.other_spec);
      return;
    }
    case 'require_without_platform_package':
      throw Object.assign(new Error(), requireWithoutPlatformPackage());
    case 'cli_without_platform_package':
      throw Object.assign(new Error(), cliWithoutPlatformPackage());
    default:
      throw new Error(`the runner does not know the call ${c.call}`);
  }
}

test('the first-hour table through Node', async (t) => {
  const redis = await RedisServer.start();
  const web = http.createServer((req, res) => res.writeHead(400, { 'Content-Type': 'text/html' }).end('<html>400</html>'));
  // A raw Redis handshake is no HTTP request: Node's parser answers it with a bare 400.
  await new Promise((resolve) => web.listen(0, '127.0.0.1', resolve));
  const closed = await freePort();
  await new Promise((resolve) => {
    const probe = net.connect(closed, '127.0.0.1');
    probe.on('error', resolve);
    probe.on('connect', () => assert.fail(`port ${closed} should be closed`));
  });
  const places = { closed_port: String(closed), http_port: String(web.address().port), redis_url: redis.url };
  try {
    for (const raw of CASES) {
      await t.test(raw.id, async () => {
        const c = fill(raw, places);
        let caught = null;
        try {
          await run(c);
        } catch (e) {
          caught = e;
        }
        assert.ok(caught, `${c.id}: no error`);
        assert.equal(caught.code, CODES[c.error], `${c.id}: ${caught.message}`);
        const missing = c.words.filter((w) => !caught.message.includes(w));
        assert.deepEqual(missing, [], `${c.id}: ${JSON.stringify(caught.message)} lacks ${missing}`);
      });
    }
  } finally {
    web.close();
    await redis.stop();
  }
});
