'use strict';
// ratekeeper's metrics in a prom-client registry, beside an application's own:
// `await register(backend)` adds one metric per family of `backend.prometheus()` to prom-client's
// default registry (or the one given), so the application's existing `/metrics` serves them.
// Each scrape renders the families once (the core's renderer) and hands them to prom-client as
// its metric objects report values; prom-client is an optional peer dependency.

/** Parses the core's own exposition (one `# HELP` and `# TYPE` per family, then its samples). */
function families(text) {
  const out = new Map();
  let current = null;
  for (const line of text.split('\n')) {
    if (line.startsWith('# HELP ')) {
      const [name, ...help] = line.slice(7).split(' ');
      current = { name, help: help.join(' ').replace(/\\n/g, '\n').replace(/\\\\/g, '\\'), type: 'untyped', values: [] };
      out.set(name, current);
    } else if (line.startsWith('# TYPE ') && current) {
      current.type = line.slice(7).split(' ')[1];
    } else if (line && !line.startsWith('#') && current) {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (!match) continue;
      const labels = {};
      for (const [, key, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[key] = value.replace(/\\"/g, '"').replace(/\\n/g, '\n').replace(/\\\\/g, '\\');
      }
      const value = match[3] === '+Inf' ? Infinity : Number(match[3]);
      current.values.push({ metricName: match[1], labels, value });
    }
  }
  return out;
}

/** prom-client's type names for the exposition's. */
const TYPES = { counter: 'counter', gauge: 'gauge', histogram: 'histogram', summary: 'summary' };

/**
 * Registers ratekeeper's metrics of `backend` with `registry` (prom-client's default registry
 * unless given): this process's, or with `{ fleet: true }` every process's (read from Redis).
 * Resolves with `{ unregister() }`.
 */
async function register(backend, registry, options) {
  if (options != null && typeof options !== 'object') throw invalidOption('options', 'must be an object');
  for (const name of Object.keys(options ?? {})) {
    if (name !== 'fleet') throw invalidOption(name, 'is not an option (known: fleet)');
  }
  const fleet = Boolean(options && options.fleet);
  const target = registry ?? require('prom-client').register;
  // One render per scrape: prom-client asks the families in registration order, so the first
  // family renders afresh and the others of the same scrape reuse that render.
  const render = () => backend.prometheus({ fleet }).then(families);
  let latest = null;
  const known = await render();
  const metrics = [...known.values()].map(({ name, help, type }, index) => ({
    name,
    help,
    type: TYPES[type] ?? 'untyped',
    aggregator: 'sum',
    async get() {
      if (index === 0 || latest === null) latest = render();
      const family = (await latest).get(name);
      return { name, help, type: TYPES[type] ?? 'untyped', aggregator: 'sum', values: family ? family.values : [] };
    },
    reset() {},
  }));
  for (const metric of metrics) target.registerMetric(metric);
  return {
    unregister() {
      for (const metric of metrics) target.removeSingleMetric(metric.name);
    },
  };
}

function invalidOption(parameter, message) {
  const error = new Error(`invalid argument \`${parameter}\`: ${message}`);
  error.code = 'ERR_INVALID_ARGUMENT';
  error.parameter = parameter;
  return error;
}

module.exports = { register };
