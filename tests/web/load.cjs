// Load from a Node process (the `ratekeeper` package built in node/): a window limiter checked
// every 20 ms until killed. Key "tenant-7" takes 3 once, for the page's inspect/reset/override.
'use strict';

const path = require('node:path');
const rk = require(path.resolve(__dirname, '../../node'));

(async () => {
  const backend = rk.Backend.redis(process.argv[2]);
  const api = backend.limiter('node-api', { kind: 'window', limit: 1000, interval: 3600 });
  await api.check('tenant-7', 3);
  await backend.flush();
  console.log('node load: running');
  for (;;) {
    try {
      await api.check('k');
    } catch (e) {
      // A loaded test machine can miss the 200 ms deadline: say so and go on.
      if (e.code !== rk.codes.TIMEOUT && e.code !== rk.codes.BACKEND_UNAVAILABLE) throw e;
      console.error(`node load: ${e.message} (transient)`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
