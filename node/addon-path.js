'use strict';
// Where the native parts of ratekeeper come from: the platform package holding the prebuilt
// addon and CLI for this machine, and what to say when it is not installed. Shared by addon.js
// (the addon) and bin/ratekeeper.js (the CLI launcher), which must not load the addon.

/** The npm package holding the prebuilt addon for this machine, e.g. `@ratekeeper/linux-x64-gnu`. */
function platformPackage() {
  let abi = '';
  if (process.platform === 'linux') {
    // glibc reports its version in the process report; musl does not.
    abi = process.report?.getReport?.().header?.glibcVersionRuntime ? '-gnu' : '-musl';
  }
  return `@ratekeeper/${process.platform}-${process.arch}${abi}`;
}

/** Platforms with a prebuilt addon package on npm (scripts/package builds them, for glibc 2.17+). */
const PREBUILT = ['@ratekeeper/linux-x64-gnu', '@ratekeeper/linux-arm64-gnu'];

/**
 * What to do when no addon loads: on a platform with a prebuilt package, install it (npm
 * leaves it out when optional dependencies are omitted, or when only the main tarball is
 * installed); elsewhere, build from source.
 */
function missingAddon(prebuilt) {
  const { version } = require('./package.json');
  if (PREBUILT.includes(prebuilt)) {
    return (
      `ratekeeper: the prebuilt addon package ${prebuilt} is not installed. npm installs it with ` +
      'ratekeeper as an optional dependency, unless optional dependencies are left out ' +
      '(--omit=optional, --no-optional, or the ratekeeper tarball installed alone). Install it: ' +
      `npm install ${prebuilt}@${version} (before that name is published, the release's file: ` +
      `npm install ${prebuilt.replace(/^@/, '').replace('/', '-')}-${version}.tgz)`
    );
  }
  return (
    `ratekeeper: no native addon for this machine: neither ${__dirname}/ratekeeper.node (a ` +
    `build from source) nor a prebuilt package (${prebuilt}) is installed. Prebuilt addons ` +
    `exist for ${PREBUILT.map((p) => p.replace('@ratekeeper/', '')).join(' and ')} (glibc 2.17 or later); ` +
    'elsewhere build ' +
    'from the source repository with `npm install ./node` (needs Rust: https://rustup.rs), or ' +
    'run `npm run build` in the package folder of a source checkout.'
  );
}

module.exports = { PREBUILT, platformPackage, missingAddon };
