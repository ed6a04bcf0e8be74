'use strict';
// One of the processes of overadmission.test.js: checks shared Redis limiters as fast as it can
// for a while, and prints the server time (decidedAtUs) of every admission.
const rk = require('../..');

const { url, startAt, durationMs, concurrency, prefix } = JSON.parse(process.argv[2]);
const backend = rk.Backend.redis(url, { prefix, deadlineMs: 5000 });
const limiters = {
  window: backend.window('oa-window', 50, '1s'),
  bucket: backend.bucket('oa-bucket', 50, '1s'),
  tokenBucket: backend.tokenBucket('oa-token', 50, 10),
};

(async () => {
  await limiters.window.peek('warm-up'); // connect before the start line
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - Date.now())));
  const end = Date.now() + durationMs;
  const admitted = { window: [], bucket: [], tokenBucket: [] };
  const refused = { window: 0, bucket: 0, tokenBucket: 0 };
  const loop = async (name) => {
    while (Date.now() < end) {
      const d = await limiters[name].check('shared');
      if (d.allowed) admitted[name].push(d.decidedAtUs);
      else refused[name] += 1;
    }
  };
  const loops = [];
  for (const name of Object.keys(limiters)) for (let i = 0; i < concurrency; i++) loops.push(loop(name));
  await Promise.all(loops);
  process.stdout.write(JSON.stringify({ admitted, refused }));
  process.exit(0);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
