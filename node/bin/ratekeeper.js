#!/usr/bin/env node
'use strict';
// `npx ratekeeper ...`: runs the `ratekeeper` CLI shipped prebuilt in this platform's addon
// package (e.g. @ratekeeper/linux-x64-gnu), passing the arguments, the standard streams and
// the exit code (or the signal) through, so the CLI behaves as if run directly.

const { spawnSync } = require('node:child_process');
const path = require('node:path');
const { platformPackage, missingAddon } = require('../addon-path.js');

function binary() {
  const prebuilt = platformPackage();
  try {
    return path.join(path.dirname(require.resolve(`${prebuilt}/package.json`)), 'ratekeeper');
  } catch (error) {
    if (!error || error.code !== 'MODULE_NOT_FOUND') throw error;
    process.stderr.write(`${missingAddon(prebuilt)}\n`);
    process.exit(1);
  }
}

const result = spawnSync(binary(), process.argv.slice(2), { stdio: 'inherit' });
if (result.error) {
  process.stderr.write(`ratekeeper: cannot run ${result.error.path || 'the CLI'}: ${result.error.message}\n`);
  process.exit(1);
}
if (result.signal) process.kill(process.pid, result.signal);
process.exit(result.status ?? 1);
