// One Node process using limiter NAME with LIMIT per minute on REDIS_URL (prefix PREFIX): it
// checks once, flushes (which registers it) and prints the registry's conflict for the name and
// its spec_conflicts, then waits for a line on stdin (so that it stays a live process) and exits.
'use strict';
const { Backend } = require(process.env.RK_NODE_PACKAGE);

async function main() {
  const [name, limit] = [process.env.NAME, Number(process.env.LIMIT)];
  const options = { prefix: process.env.PREFIX };
  if (process.env.ON_CONFLICT) options.onConflict = process.env.ON_CONFLICT;
  const backend = Backend.redis(process.env.REDIS_URL, options);
  let limiter;
  try {
    limiter = backend.window(name, limit, '1m');
  } catch (error) {
    console.log(JSON.stringify({ error: error.code, parameter: error.parameter, message: error.message }));
    return;
  }
  await limiter.check();
  await backend.flush();
  const entry = (await backend.limiters()).find((l) => l.name === name);
  console.log(JSON.stringify({ conflict: entry.conflict, specConflicts: limiter.metrics().specConflicts }));
  await new Promise((resolve) => process.stdin.once('data', resolve));
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
