// The installed `ratekeeper` package on a platform with no prebuilt addon (scripts/test-packages
// runs it in its npm project, which holds this machine's platform package): the machine is made to
// report riscv64 before the package loads, so the loader looks for @ratekeeper/linux-riscv64-gnu.
// The error must name the prebuilt platforms and how to build from source.
'use strict';
const assert = require('node:assert');

Object.defineProperty(process, 'arch', { value: 'riscv64' });
try {
  require('ratekeeper');
  assert.fail('ratekeeper loaded on an unprebuilt platform');
} catch (error) {
  assert.equal(error.code, 'MODULE_NOT_FOUND', error.stack);
  for (const words of ['@ratekeeper/linux-riscv64-gnu', 'linux-x64-gnu and linux-arm64-gnu', 'glibc 2.17', 'npm install ./node', 'https://rustup.rs']) {
    assert.ok(error.message.includes(words), `the message lacks "${words}": ${error.message}`);
  }
  console.log(`node on an unprebuilt platform: ${error.message}`);
}
