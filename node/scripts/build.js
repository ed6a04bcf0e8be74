#!/usr/bin/env node
// Builds the native addon: `cargo build -p ratekeeper-node` (release; `--debug` for the tests),
// then copies the cdylib to `ratekeeper.node` beside index.js. `npm install` runs it.
//
// It is a plain `cargo build`, not `napi build`: napi's CLI always passes `--target <triple>`,
// which moves the build to target/<triple>/ and compiles every crate a second time. A plain
// build shares the workspace's target directory and build cache with `cargo test`, scripts/test
// and the other bindings, so after the Rust build only this crate is compiled.
//
// `--typedef` also regenerates native.d.ts from the `///` docs and signatures of the Rust
// exports (napi-derive writes them to NAPI_TYPE_DEF_TMP_FOLDER while compiling; the CLI's
// `generateTypeDef` renders them). That needs the dev dependency @napi-rs/cli, so `npm install`
// of the package in another project (no dev dependencies) only builds; native.d.ts is committed.
//
// NAPI_TYPE_DEF_TMP_FOLDER is set to the same folder on every build (per profile), so builds
// with and without `--typedef` never invalidate each other; only when that folder has lost its
// file is this crate (and only it) recompiled, through napi-build's NAPI_FORCE_BUILD_* variable.
'use strict';

const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const packageDir = path.resolve(__dirname, '..');
const release = !process.argv.includes('--debug');
const typedef = process.argv.includes('--typedef');
const profileDir = release ? 'release' : 'debug';
const crate = 'ratekeeper-node';
const forceVar = `NAPI_FORCE_BUILD_${crate.toUpperCase().replace(/-/g, '_')}`;

/** Says plainly, without a stack, that Rust is missing (the fix is an install, not a bug). */
function noCargo() {
  console.error(
    'ratekeeper: building the native addon from source needs Rust, and `cargo` is not on PATH. ' +
      'Install Rust (https://rustup.rs, then open a new shell) and run the install again, or ' +
      'install the published package, which ships a prebuilt addon for linux-x64-gnu and linux-arm64-gnu (glibc 2.17+).',
  );
  process.exit(1);
}

function cargo(args, env = {}) {
  const result = spawnSync('cargo', args, {
    cwd: packageDir,
    stdio: 'inherit',
    env: { ...process.env, ...env },
  });
  if (result.error) {
    if (result.error.code === 'ENOENT') noCargo();
    throw result.error;
  }
  if (result.status !== 0) process.exit(result.status ?? 1);
}

function targetDir() {
  let out;
  try {
    out = execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], {
      cwd: packageDir,
      maxBuffer: 64 * 1024 * 1024,
    });
  } catch (error) {
    if (error.code === 'ENOENT') noCargo();
    throw error;
  }
  return JSON.parse(out).target_directory;
}

function libraryName() {
  const base = crate.replace(/-/g, '_');
  if (process.platform === 'win32') return `${base}.dll`;
  if (process.platform === 'darwin') return `lib${base}.dylib`;
  return `lib${base}.so`;
}

async function main() {
  const target = targetDir();
  const typeDefDir = path.join(target, 'napi-rs', 'type-def', profileDir);
  fs.mkdirSync(typeDefDir, { recursive: true });
  const env = { NAPI_TYPE_DEF_TMP_FOLDER: typeDefDir };
  const args = ['build', '-p', crate, ...(release ? ['--release'] : [])];
  cargo(args, env);
  const typeDefFile = path.join(typeDefDir, crate);
  if (typedef && !fs.existsSync(typeDefFile)) {
    // Up to date, but the intermediate type file is gone: recompile this crate only.
    cargo(args, { ...env, [forceVar]: String(Date.now()) });
  }

  const built = path.join(target, profileDir, libraryName());
  const dest = path.join(packageDir, 'ratekeeper.node');
  const staging = `${dest}.${process.pid}.tmp`;
  fs.copyFileSync(built, staging);
  fs.renameSync(staging, dest);
  console.log(`ratekeeper: ${path.relative(process.cwd(), dest) || dest} <- ${built}`);

  if (typedef) {
    const { generateTypeDef } = require('@napi-rs/cli');
    const { dts } = await generateTypeDef({
      typeDefDir,
      cwd: packageDir,
      constEnum: true,
      declareBindingTarget: false,
    });
    if (!dts.includes('export declare class NativeLimiter')) {
      throw new Error(`no type definitions were generated from ${typeDefFile}`);
    }
    fs.writeFileSync(path.join(packageDir, 'native.d.ts'), dts);
    console.log('ratekeeper: native.d.ts regenerated');
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
