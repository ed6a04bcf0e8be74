#!/usr/bin/env node
// One real check of each job, by ratekeeper's Node binding and by rate-limiter-flexible + ioredis,
// on the redis-server at 127.0.0.1:PORT, for bench/python/peer_server_time.py: that script
// watches them with MONITOR and replays each library's very EVALSHA (keys, arguments, script)
// to measure server time per check. Prints JSON: rate-limiter-flexible's script text and the
// key each call used.
//
//   node bench/node/server-time-calls.js PORT
'use strict';

const path = require('node:path');

async function main() {
  const port = Number(process.argv[2]);
  const rk = require(path.resolve(__dirname, '..', '..', 'node'));
  const Redis = require('ioredis');
  const { RateLimiterRedis } = require('rate-limiter-flexible');
  const backend = rk.Backend.redis(`redis://127.0.0.1:${port}`, { deadlineMs: 5000 });
  // The jobs of the server-time table: limits far above any run's load (nothing is refused).
  await backend.bucket('st-bucket', 1e9, '1m').check('k-bucket');
  await backend.tokenBucket('st-token', 1e6, 1e9).check('k-token');
  await backend.window('st-log', 1000, '1m').check('k-log');
  await backend.slidingWindow('st-sliding', [['1m', 1e9, '1s']]).check('k-sliding');
  const ioredis = new Redis({ host: '127.0.0.1', port });
  const rlf = new RateLimiterRedis({ storeClient: ioredis, points: 1e9, duration: 60, keyPrefix: 'rlf' });
  await rlf.consume('k-rlf');
  await ioredis.call('ECHO', 'server-time-calls: done');
  console.log(JSON.stringify({ rlf_lua: rlf._incrTtlLuaScript, rlf_version: require('rate-limiter-flexible/package.json').version }));
  await ioredis.quit();
  process.exit(0);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
