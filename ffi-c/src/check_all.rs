//! Several limits at once, all or nothing: `rk_backend_check_all` and `rk_backend_acquire_all`
//! over a C array of parts (see `ratekeeper::Backend::check_all`).

use std::os::raw::c_char;

use ratekeeper::params::timeout_from_secs;
use ratekeeper::{CombinedDecision, Error, Limiter};

use crate::args::{arg_opt_str, arg_ref, arg_slice, fits_in_memory, Out};
use crate::backend::rk_backend;
use crate::calls::{rk_decision, RK_WAIT_DEFAULT};
use crate::error::{rk_status, Failure};
use crate::limiter::rk_limiter;
use crate::panic::ffi_status;

/// \brief One part of `rk_backend_check_all`: a limiter, a key and a cost.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rk_check_all_part {
    /// The part's limiter, built on the backend the call is made on.
    pub limiter: *const rk_limiter,
    /// The part's key (up to 1 KiB of UTF-8), or NULL for the limiter's single shared key.
    pub key: *const c_char,
    /// What the part consumes: 1..=2^53 (concurrent limiters take 1).
    pub cost: u64,
}

/// A part as the core takes it: `(limiter, key, cost)`.
type Part<'a> = (&'a Limiter, Option<&'a str>, u64);

/// The parts as the core takes them, naming a NULL limiter or a bad key by its path.
fn parts_of(parts: &[rk_check_all_part]) -> Result<Vec<Part<'_>>, Failure> {
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let limiter = &arg_ref(&format!("parts[{i}].limiter"), part.limiter)?.inner;
            let key = arg_opt_str(&format!("parts[{i}].key"), part.key)?;
            Ok((limiter, key, part.cost))
        })
        .collect()
}

/// Writes a combination's figures to the out-params.
fn write(combined: &CombinedDecision, decisions: &mut [rk_decision], allowed: Out<bool>, retry: Out<u64>) {
    for (out, part) in decisions.iter_mut().zip(&combined.parts) {
        *out = rk_decision::from(&part.decision);
    }
    allowed.write(combined.allowed);
    retry.write(u64::try_from(combined.retry_after.as_micros()).unwrap_or(u64::MAX));
}

/// The caller's array of `len` decisions to fill.
fn decision_array<'a>(ptr: *mut rk_decision, len: usize) -> Result<&'a mut [rk_decision], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Failure::null("decisions_out"));
    }
    // `len` is the parts' count: a count no array can hold is refused as the parts' would be.
    fits_in_memory::<rk_decision>("parts", len)?;
    // SAFETY: the caller's contract: `ptr` points to `len` writable, aligned `rk_decision`s
    // (plain data: any previous content may be overwritten) for the duration of the call; their
    // total size fits in isize (checked above), as `from_raw_parts_mut` requires.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// \brief Decides every part in one atomic step at one instant: all are admitted and consume
/// their cost, or none consumes anything. Never waits.
///
/// A refused combination still returns #RK_OK with `*allowed_out` false; each part's decision
/// is in `decisions_out` (in a refused combination a part may say `allowed`, alone it would
/// have passed, but it consumed nothing and holds no lease). Admitted concurrent parts hold a
/// lease in their decision: release each with `rk_limiter_release`. On a Redis Cluster the
/// parts' keys must share one slot (limiters whose spec says `"colocate": "tenant"`, keys of
/// one tenant), or the call fails with #RK_INVALID_ARGUMENT naming `parts`. A bad part fails
/// naming it (`parts[1].cost`) before anything is written; leased token buckets and partitions
/// cannot take part.
///
/// \param backend The backend every part's limiter was built on.
/// \param parts The parts (at least one, at most 64).
/// \param parts_len How many parts.
/// \param decisions_out Receives one decision per part (an array of `parts_len`).
/// \param allowed_out Receives whether every part was admitted.
/// \param retry_after_us_out Receives 0 when allowed, else the longest `retry_after_us` of the
///        parts that refused.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_backend_check_all(
    backend: *const rk_backend,
    parts: *const rk_check_all_part,
    parts_len: usize,
    decisions_out: *mut rk_decision,
    allowed_out: *mut bool,
    retry_after_us_out: *mut u64,
) -> rk_status {
    ffi_status! {
        let allowed = Out::new("allowed_out", allowed_out)?;
        let retry = Out::new("retry_after_us_out", retry_after_us_out)?;
        let decisions = decision_array(decisions_out, parts_len)?;
        let backend = &arg_ref("backend", backend)?.inner;
        let parts = parts_of(arg_slice("parts", parts, parts_len)?)?;
        let combined = backend.check_all_blocking(&parts)?;
        write(&combined, decisions, allowed, retry);
        Ok(())
    }
}

/// \brief Like `rk_backend_check_all`, waiting up to `wait_timeout_secs` for a step that
/// admits every part.
///
/// Waits sleep exactly until the combination can change (or until a release frees a concurrent
/// part's slot). When waiting cannot succeed in time, returns #RK_OVER_LIMIT at once with
/// `*retry_after_us_out` set (and `*allowed_out` false).
///
/// \param wait_timeout_secs Seconds to wait; #RK_WAIT_DEFAULT uses the shortest of the parts'
///        limiters' default wait timeouts.
/// \return #RK_OK, #RK_OVER_LIMIT, #RK_NULL_PARAMETER, #RK_INVALID_UTF8,
///         #RK_INVALID_ARGUMENT, #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_backend_acquire_all(
    backend: *const rk_backend,
    parts: *const rk_check_all_part,
    parts_len: usize,
    wait_timeout_secs: f64,
    decisions_out: *mut rk_decision,
    allowed_out: *mut bool,
    retry_after_us_out: *mut u64,
) -> rk_status {
    ffi_status! {
        let allowed = Out::new("allowed_out", allowed_out)?;
        let retry = Out::new("retry_after_us_out", retry_after_us_out)?;
        let decisions = decision_array(decisions_out, parts_len)?;
        let backend = &arg_ref("backend", backend)?.inner;
        let parts = parts_of(arg_slice("parts", parts, parts_len)?)?;
        let wait = if wait_timeout_secs == RK_WAIT_DEFAULT {
            None
        } else {
            Some(timeout_from_secs("wait_timeout", wait_timeout_secs)?)
        };
        match backend.acquire_all_blocking(&parts, wait) {
            Ok(combined) => {
                write(&combined, decisions, allowed, retry);
                Ok(())
            }
            Err(error @ Error::OverLimit { retry_after }) => {
                allowed.write(false);
                retry.write(u64::try_from(retry_after.as_micros()).unwrap_or(u64::MAX));
                Err(Failure::from(error))
            }
            Err(error) => Err(error.into()),
        }
    }
}
