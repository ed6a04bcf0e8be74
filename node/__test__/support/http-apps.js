'use strict';
// HTTP apps for the middleware tests: the example files of examples/node/http/ (and test apps)
// started as child processes on free loopback ports, the way a user runs them, with
// `require('ratekeeper')` resolving to this package; and client processes that send requests.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const NODE_DIR = path.resolve(__dirname, '..', '..');
const ROOT = path.resolve(NODE_DIR, '..');
const EXAMPLES = path.join(ROOT, 'examples', 'node', 'http');

/** A directory whose node_modules/ratekeeper is this package (as an installed copy would be). */
let modules = null;
function nodePath() {
  if (modules === null) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratekeeper-http-'));
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(NODE_DIR, path.join(dir, 'node_modules', 'ratekeeper'));
    modules = [path.join(dir, 'node_modules'), path.join(NODE_DIR, 'node_modules')].join(path.delimiter);
  }
  return modules;
}

/** Every app started by this process, killed on exit even if a test forgot. */
const running = new Set();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/**
 * Starts `file` (a path, or a name in examples/node/http/) with `env`, on a free port (PORT=0;
 * the app prints `listening on <port>`) by `command` (default: this Node). Resolves with
 * { port, url, stop(), output() }.
 */
function startApp(file, env = {}, command = process.execPath) {
  const script = path.isAbsolute(file) ? file : path.join(EXAMPLES, file);
  const child = spawn(command, [script], {
    env: { ...process.env, ...env, PORT: '0', NODE_PATH: nodePath() },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const stop = () =>
    new Promise((resolve) => {
      running.delete(child);
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`${file} did not start within 60 s:\n${output}`));
    }, 60_000);
    const onData = () => {
      const match = /listening on (\d+)/.exec(output);
      if (!match) return;
      clearTimeout(timer);
      child.stdout.off('data', onData);
      const port = Number(match[1]);
      resolve({ port, url: `http://127.0.0.1:${port}`, stop, output: () => output });
    };
    child.stdout.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${file} exited with ${code}:\n${output}`));
    });
  });
}

/**
 * Runs `processes` client processes at once, each sending `requests` requests (`concurrency`
 * in flight) to `url`; resolves with the total count of each status.
 */
async function hammer(url, { processes, requests, method = 'GET', concurrency = 4 }) {
  const client = path.join(__dirname, 'http-client.js');
  const runs = [];
  for (let i = 0; i < processes; i++) {
    runs.push(
      new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [client, url, String(requests), method, String(concurrency)], {
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`client exited ${code}`))));
      }),
    );
  }
  const totals = {};
  for (const counts of await Promise.all(runs)) {
    for (const [status, n] of Object.entries(counts)) totals[status] = (totals[status] ?? 0) + n;
  }
  return totals;
}

/** The Python of the venv scripts/test-python makes (RATEKEEPER_PY_VENV, else .venv), or null. */
function venvPython() {
  const venv = process.env.RATEKEEPER_PY_VENV || path.join(ROOT, '.venv');
  const python = path.join(venv, 'bin', 'python');
  return fs.existsSync(python) ? python : null;
}

module.exports = { startApp, hammer, venvPython, EXAMPLES, ROOT };
