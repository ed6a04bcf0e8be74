'use strict';
// ratekeeper/prom-client: the families of backend.prometheus() served by a real prom-client
// registry beside the application's own metrics, re-rendered at each scrape.

const test = require('node:test');
const assert = require('node:assert/strict');
const promClient = require('prom-client');
const { Backend } = require('..');
const { register } = require('../prom-client.js');

test('prom-client: ratekeeper families join an app registry and move between scrapes', async () => {
  const registry = new promClient.Registry();
  const requests = new promClient.Counter({ name: 'app_requests_total', help: 'Requests.', registers: [registry] });
  requests.inc();
  const backend = Backend.memory();
  const api = backend.tokenBucket('api', 0.001, 2);
  const handle = await register(backend, registry);
  for (let i = 0; i < 3; i++) await api.check('k');
  let text = await registry.metrics();
  assert.match(text, /^app_requests_total 1$/m);
  assert.match(text, /^# TYPE ratekeeper_checks_total counter$/m);
  assert.match(text, /^ratekeeper_checks_total\{limiter="api",kind="token_bucket",outcome="allowed"\} 2$/m);
  assert.match(text, /^ratekeeper_checks_total\{limiter="api",kind="token_bucket",outcome="refused"\} 1$/m);
  await api.check('k');
  text = await registry.metrics();
  assert.match(text, /^ratekeeper_checks_total\{limiter="api",kind="token_bucket",outcome="refused"\} 2$/m);
  const json = await registry.getMetricsAsJSON();
  const checks = json.find((m) => m.name === 'ratekeeper_checks_total');
  assert.equal(checks.type, 'counter');

  handle.unregister();
  assert.doesNotMatch(await registry.metrics(), /ratekeeper_/);
  await assert.rejects(register(backend, registry, { feet: true }), { code: 'ERR_INVALID_ARGUMENT', parameter: 'feet' });
});
