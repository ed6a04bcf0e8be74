'use strict';
// The shared conformance vectors through Node, on memory, a real redis-server and a 3-master
// Redis Cluster (the vectors' manual clock is sent to Redis with every call).

const test = require('node:test');
const assert = require('node:assert/strict');
const { Backend } = require('..');
const { runConformance } = require('./support/vectors.js');
const { RedisServer, RedisCluster } = require('./support/redis.js');

let caseNumber = 0;
// Each case gets its own key prefix. The deadline is generous: vectors test answers, not
// latency, and the finest sliding window (100,000 sub-buckets) is a slow script on a busy machine.
const options = (clock) => ({ clock, prefix: `node${process.pid}c${caseNumber++}`, deadlineMs: 10000, connectTimeoutMs: 5000 });

function report(label, { total, perKind, problems }) {
  const kinds = Object.entries(perKind).map(([k, n]) => `${k} ${n}`).join(', ');
  console.log(`vectors on ${label}: ${total} cases, ${problems.length} problems (${kinds})`);
  assert.deepEqual(problems, [], `${problems.length} conformance problems on ${label}`);
}

test('conformance vectors on memory', async () => {
  report('memory', await runConformance((clock) => Backend.memory({ clock })));
});

test('conformance vectors on redis', async (t) => {
  const server = await RedisServer.start();
  t.after(() => server.destroy());
  report('redis', await runConformance((clock) => Backend.redis(server.url, options(clock))));
});

test('conformance vectors on redis cluster', async (t) => {
  const cluster = await RedisCluster.start();
  t.after(() => cluster.destroy());
  report('redis cluster', await runConformance((clock) => Backend.cluster(cluster.seeds, options(clock))));
});
