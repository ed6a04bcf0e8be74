'use strict';
// ratekeeper/fastify: a Fastify plugin over ratekeeper limiters, global and per route
// (`config: { rateLimit: {...} | false }`), like @fastify/rate-limit. The options are those of
// every ratekeeper HTTP adapter (docs/src/guides/http/index.md).

const { buildCore, PROBLEM_MEDIA_TYPE } = require('./core.js');
const { invalidArgument } = require('./errors.js');
const { onResponseDone } = require('./response-done.js');

/** Options Fastify itself adds to a plugin's options (`register(plugin, { prefix })`). */
const FASTIFY_OPTIONS = new Set(['prefix', 'logLevel', 'logSerializers']);

/**
 * Applies a request's outcome to `reply`: its header fields, and a refusal's answer. Returns
 * what the hook waits for before it lets Fastify go on (a refusal's reply or handler), if
 * anything.
 */
function answer(core, request, reply, outcome) {
  if (outcome === null) return undefined;
  for (const [name, value] of outcome.headers) reply.header(name, value);
  if (outcome.refused) {
    if (core.handler) return core.handler(request, reply, outcome.info);
    return reply.code(outcome.status).type(PROBLEM_MEDIA_TYPE).send(JSON.stringify(outcome.problem));
  }
  if (outcome.pending) onResponseDone(reply.raw, (status) => outcome.complete(status));
  return undefined;
}

/**
 * The onRequest hook of one set of options. Callback style: an admitted request goes on from
 * the decision's own continuation (an async hook would add a Promise and a microtask of its
 * own, and Fastify another to await it).
 */
function hookFor(core) {
  return function rateLimitHook(request, reply, done) {
    core.decide(request, request.raw.socket.remoteAddress, (name) => request.headers[name]).then((outcome) => {
      let waitFor;
      try {
        waitFor = answer(core, request, reply, outcome);
      } catch (error) {
        done(error);
        return;
      }
      if (waitFor === undefined) done();
      else Promise.resolve(waitFor).then(() => done(), done);
    }, done);
  };
}

/**
 * The plugin. Its options are the middleware's plus `global` (default true: every route
 * registered after it is limited; false: only routes with `config.rateLimit`). A route's
 * `config.rateLimit` object overrides the plugin's options for that route; `false` exempts
 * it. Every set of options is validated when the route is added (`ERR_INVALID_ARGUMENT`).
 */
function fastifyRateLimit(fastify, options, done) {
  const defaults = {};
  let global = true;
  for (const [name, value] of Object.entries(options ?? {})) {
    if (name === 'global') global = value;
    else if (!FASTIFY_OPTIONS.has(name)) defaults[name] = value;
  }
  if (typeof global !== 'boolean') return done(invalidArgument('global', 'must be a boolean'));
  let globalHook = null;
  try {
    if (global) globalHook = hookFor(buildCore(defaults));
  } catch (error) {
    return done(error);
  }
  fastify.addHook('onRoute', (route) => {
    const own = route.config?.rateLimit;
    if (own === false || (own === undefined && !global)) return;
    if (own !== undefined && (own === null || typeof own !== 'object')) {
      throw invalidArgument('config.rateLimit', 'must be an object of options or false');
    }
    const hook = own === undefined ? globalHook : hookFor(buildCore({ ...defaults, ...own }));
    const existing = route.onRequest;
    route.onRequest = existing == null ? [hook] : [hook, ...(Array.isArray(existing) ? existing : [existing])];
  });
  return done();
}

// As fastify-plugin does: the hooks apply to the instance the plugin is registered on, not
// only inside the plugin's own encapsulated context.
fastifyRateLimit[Symbol.for('skip-override')] = true;
fastifyRateLimit[Symbol.for('fastify.display-name')] = 'ratekeeper';
fastifyRateLimit[Symbol.for('plugin-meta')] = { name: 'ratekeeper', fastify: '>=4' };

module.exports = fastifyRateLimit;
module.exports.default = fastifyRateLimit;
module.exports.fastifyRateLimit = fastifyRateLimit;
