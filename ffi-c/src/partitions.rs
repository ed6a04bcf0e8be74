//! Leased partitions (Azure's rate limiting pattern): the constructor, what a process holds, and
//! giving it back. Checks and waits are the usual `rk_limiter_check` / `rk_limiter_acquire`.

use std::os::raw::c_char;

use ratekeeper::params::duration_from_secs;
use ratekeeper::LimiterSpec;

use crate::args::{arg_opt_str, arg_ref, Out};
use crate::backend::rk_backend;
use crate::error::rk_status;
use crate::limiter::{build, rk_limiter};
use crate::panic::ffi_status;

/// \brief Creates a partitions limiter: `total_rate` units per second split into `partitions`
/// equal partitions (Azure's rate limiting pattern).
///
/// On Redis each process leases a fair share of the partitions for `lease_ttl_secs` (renewed
/// while it calls), and `rk_limiter_check` / `rk_limiter_acquire` pace it to the rate it holds
/// (20 calls per 200 ms at 100 per second, not 100 at once). A dead process's partitions return
/// after `lease_ttl_secs`; `rk_limiter_close` gives them back at once. On the memory backend the
/// process holds every partition of its class.
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param total_rate Units per second of the whole service: finite, above 0, at most 1,000,000.
/// \param partitions How many equal partitions (1 to 1024).
/// \param lease_ttl_secs How long a lease lasts unless renewed (at least 0.1 s; Azure's 15).
/// \param reserved Partitions set aside for the priority class (0: none).
/// \param priority Nonzero: this limiter belongs to the priority class and leases only the
///        reserved partitions; zero: only the others.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_partitions(
    backend: *const rk_backend,
    name: *const c_char,
    total_rate: f64,
    partitions: u64,
    lease_ttl_secs: f64,
    reserved: u64,
    priority: i32,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || {
            Ok(LimiterSpec::Partitions {
                total_rate,
                partitions,
                lease_ttl: duration_from_secs("lease_ttl", lease_ttl_secs)?,
                reserved,
                priority: priority != 0,
            })
        })
    }
}

/// \brief Gives back what this process holds: every partition of a partitions limiter, so that
/// other processes may lease them at once instead of after the lease TTL, and the unspent tokens
/// of a leased limiter's leases (call it before `rk_limiter_free` so that they do not lapse); a
/// later call leases anew. Does nothing on other limiters.
///
/// \param limiter The limiter.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_close(limiter: *const rk_limiter) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        Ok(limiter.close_blocking()?)
    }
}

/// \brief How many partitions this process holds of a partitions limiter for `key` now.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param count_out Receives the number of partitions held.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, or #RK_INVALID_ARGUMENT (naming
///         `limiter`) on other kinds of limiter.
#[no_mangle]
pub extern "C" fn rk_limiter_partitions_held(
    limiter: *const rk_limiter,
    key: *const c_char,
    count_out: *mut u64,
) -> rk_status {
    ffi_status! {
        let out = Out::new("count_out", count_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        out.write(limiter.partitions_held(key)?.partitions.len() as u64);
        Ok(())
    }
}
