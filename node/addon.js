'use strict';
// Loads the native addon (the Rust core, napi-rs) for index.js and http.js.

const { platformPackage, missingAddon } = require('./addon-path.js');

/**
 * The native addon: a build from source beside this file (`npm install ./node` or `npm run
 * build` in the repository), else the prebuilt addon of this platform's package (what
 * `npm install ratekeeper` installs).
 */
function loadNative() {
  try {
    return require('./ratekeeper.node');
  } catch (error) {
    if (!error || error.code !== 'MODULE_NOT_FOUND') throw error;
  }
  const prebuilt = platformPackage();
  try {
    return require(prebuilt);
  } catch (error) {
    if (!error || error.code !== 'MODULE_NOT_FOUND') throw error;
    throw Object.assign(new Error(missingAddon(prebuilt), { cause: error }), { code: 'MODULE_NOT_FOUND' });
  }
}

module.exports = loadNative();
