'use strict';
// The TypeScript typings (index.d.ts over the generated native.d.ts) compile a program using
// the whole API under `--strict`, and reject misuse.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');

test('typings: tsc --strict accepts the API and rejects misuse', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const result = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'types', 'tsconfig.json')], {
    encoding: 'utf8',
  });
  assert.equal(result.status, 0, `tsc failed:\n${result.stdout}${result.stderr}`);
});

test('typings: ratekeeper/express, /fastify, /hono and /nestjs under tsc --strict (self-referenced by name)', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const result = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'types', 'http', 'tsconfig.json')], {
    encoding: 'utf8',
  });
  assert.equal(result.status, 0, `tsc failed:\n${result.stdout}${result.stderr}`);
});
