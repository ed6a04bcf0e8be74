// A Node process for the live-limits test (py/tests/test_live.py): the same steps as
// live_probe.c. Usage: node live_probe.js PACKAGE_DIR URL PREFIX NAME SPEC TARGETS
'use strict';

const [packageDir, url, prefix, name, spec, targets] = process.argv.slice(2);
const { Backend } = require(packageDir);

async function main() {
  const backend = Backend.redis(url, { prefix, deadlineMs: 2000 });
  const limiter = backend.limiter(name, spec);
  await limiter.peek();
  await backend.flush();
  console.log('ready');
  for (const target of targets.split(',').map(Number)) {
    const giveUp = Date.now() + 20000;
    let limit;
    for (;;) {
      try {
        limit = (await limiter.peek()).limit;
      } catch {
        // The server is restarting: the next peek reconnects.
      }
      if (limit === target) break;
      if (Date.now() > giveUp) throw new Error(`limit still ${limit}, not ${target}`);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    console.log(String(Date.now()));
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
