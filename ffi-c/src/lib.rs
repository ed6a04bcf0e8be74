//! # libratekeeper: the C ABI of ratekeeper
//!
//! Opaque thread-safe handles (`rk_backend`, `rk_limiter`), plain `#[repr(C)]` values
//! (`rk_decision`, `rk_lease`), an `rk_status` from every fallible call, results through
//! out-params and a per-thread error message. No limiter logic lives here: arguments are checked
//! for NULL and UTF-8, converted with the core's `ratekeeper::params` validators, and errors are
//! mapped in `error.rs`. Every `extern "C"` body runs inside the one panic boundary of
//! `panic.rs`. `include/ratekeeper.h` is generated from this crate by cbindgen (see
//! `cbindgen.toml`); the `///` comments here are its doxygen.
//!
//! Conventions of the C API:
//! - counts, costs, limits and capacities are `uint64_t` (at most 2^53, `RK_MAX_COUNT`);
//! - durations given are `double` seconds (fractions allowed, at least one microsecond, at most
//!   100 years); durations returned are `uint64_t` microseconds (`*_us`);
//! - strings are NUL-terminated UTF-8; an optional `key` may be NULL;
//! - out-params are written only on success; NULL, invalid UTF-8 and out-of-range values are
//!   reported before any state is touched.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// Every `unsafe` block says, in a `// SAFETY:` comment, why the contract it relies on holds.
#![deny(clippy::undocumented_unsafe_blocks)]
// The C API takes raw pointers in safe `extern "C"` functions, as rustls-ffi does: the
// contract each pointer must meet is documented on the function.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

// cbindgen writes the header in the order of these modules (errors, backends, clocks, limiters, calls,
// calls completing through a callback, upstream feedback, backoff, test hooks); the blank lines keep rustfmt from sorting them.
pub mod error;

pub mod backend;

pub mod backend_json;

pub mod clock;

pub mod limiter;

pub mod calls;

pub mod completion;

pub mod check_all;

pub mod settle;

pub mod partitions;

pub mod operate;

pub mod upstream;

pub mod block;

pub mod backoff;
/// The HTTP middleware's rules: client key, header fields, partition key.
pub mod http;

mod test_hooks;

mod args;
mod panic;

use std::os::raw::c_char;

use panic::ffi_boundary;

/// \brief The version of libratekeeper, e.g. `"0.1.0"`, as a static NUL-terminated string.
///
/// \return The version; never NULL; never free it.
#[no_mangle]
pub extern "C" fn rk_version() -> *const c_char {
    ffi_boundary! {
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
    }
}
