//! Node bindings for ratekeeper (the `ratekeeper` npm package). No limiter logic lives here:
//! arguments are converted (with the core's validation), calls go to the core, and results and
//! errors come back as JavaScript values.
//!
//! - [`runtime`]: the core's runtime runs every call (and is registered with napi in `init`).
//! - [`bridge`]: results reach JavaScript during the call, or batched through one thread-safe
//!   function per environment; index.js makes the Promises.
//! - [`driven`]: Redis calls on a connection the JavaScript thread polls itself (libuv).
//! - [`error`]: the one conversion of core errors into `Error` objects with a stable `code`.
//! - [`hot_calls`]: the by-handle check and peek, exported without napi-rs's per-call glue.
//! - [`args`]: reading JavaScript arguments; [`options`]: options objects (typed, unknown
//!   keys refused); [`decision`]: the results.
//! - [`backend`], [`backoff`], [`limiter`], [`shedder`], [`clock`]: the exported classes;
//!   [`http`]: the HTTP middleware's rules (client key, header fields, partition key).
#![deny(clippy::all)]
// Every `unsafe` block says, in a `// SAFETY:` comment, why the contract it relies on holds.
#![deny(clippy::undocumented_unsafe_blocks)]
// napi registers exported functions only outside `cfg(test)`, so the unit-test build sees them
// as unused.
#![cfg_attr(test, allow(dead_code))]

mod args;
mod backend;
mod backoff;
mod bridge;
mod check_all;
mod clock;
mod decision;
mod driven;
mod error;
mod hot_calls;
mod http;
mod limiter;
mod operate;
mod options;
mod runtime;
mod settle;
mod shedder;
mod trace;

use napi_derive::napi;

#[napi_derive::module_init]
fn init() {
    // The core runtime's threads outlive any one Node environment (worker_threads), so the
    // addon image must never be unloaded under them.
    napi::bindgen_prelude::retain_current_module_for_unload_safety();
    napi::bindgen_prelude::register_async_runtime(runtime::CoreRuntime);
}

/// The version of the ratekeeper core this addon is built from.
#[napi]
pub fn core_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
