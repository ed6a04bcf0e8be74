//! Blocking: keep a limiter's key refused for a while, after a refusal (`block_for`,
//! `rk_limiter_with_block_for` or `"block_for"` in a JSON spec) or by hand
//! (`rk_limiter_block`), and end a block early (`rk_limiter_unblock`); and the deny cache that
//! remembers refusals in process (`rk_limiter_with_deny_cache`).

use std::os::raw::c_char;

use ratekeeper::params::duration_from_secs;

use crate::args::{arg_opt_str, arg_ref, Out};
use crate::error::rk_status;
use crate::limiter::{publish, rk_limiter};
use crate::panic::ffi_status;

/// \brief Blocks `key` for `duration_secs` from now: until the block ends, every check and
/// peek of this limiter and key, in every process sharing the backend, is refused with
/// `retry_after_us` = the block's remaining time (consuming nothing), and
/// `rk_limiter_acquire` waits it out.
///
/// The block replaces the one in effect, shorter or longer. A block is not a pause:
/// `rk_limiter_resume` leaves it alone; `rk_limiter_unblock` ends it; `rk_limiter_reset`
/// forgets it with the rest of the key's state. On Redis it is one key with a TTL equal to
/// the block, checked inside each call's script (no extra round trip).
///
/// \param limiter The limiter.
/// \param key The identity blocked, or NULL for the limiter's single shared key.
/// \param duration_secs The block in seconds (fractions allowed; at least one microsecond, at
///        most 100 years; 0, negative and NaN are #RK_INVALID_ARGUMENT naming `duration`).
/// \param in_effect_us_out Receives the block in effect after the call, in microseconds; may
///        be NULL.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_block(
    limiter: *const rk_limiter,
    key: *const c_char,
    duration_secs: f64,
    in_effect_us_out: *mut u64,
) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        let duration = duration_from_secs("duration", duration_secs)?;
        let in_effect = limiter.block_blocking(key, duration)?;
        // SAFETY: the caller's contract: NULL, or aligned and writable.
        if let Some(out) = unsafe { in_effect_us_out.as_mut() } {
            *out = u64::try_from(in_effect.as_micros()).unwrap_or(u64::MAX);
        }
        Ok(())
    }
}

/// \brief Ends the block of `key` now, in every process sharing the backend; the key's other
/// state, and a pause, are kept.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param was_blocked_out Receives whether a block was in effect; may be NULL.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_unblock(
    limiter: *const rk_limiter,
    key: *const c_char,
    was_blocked_out: *mut bool,
) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        let was_blocked = limiter.unblock_blocking(key)?;
        // SAFETY: the caller's contract: NULL, or aligned and writable.
        if let Some(out) = unsafe { was_blocked_out.as_mut() } {
            *out = was_blocked;
        }
        Ok(())
    }
}

/// \brief A copy of `limiter` (same state and metrics) whose refusals block the key for
/// `block_for_secs`: after a refused check, every check and peek of this limiter and key, in
/// every process sharing the backend, is refused with `retry_after_us` = the block's remaining
/// time, consuming nothing; the refusal that starts the block says so too. A JSON spec says
/// the same with `"block_for": seconds`.
///
/// \param limiter The limiter to copy.
/// \param block_for_secs How long a refusal blocks the key, in seconds (at least one
///        microsecond, at most 100 years; 0, negative and NaN are #RK_INVALID_ARGUMENT naming
///        `block_for`).
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_with_block_for(
    limiter: *const rk_limiter,
    block_for_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let block_for = duration_from_secs("block_for", block_for_secs)?;
        publish(out, limiter.with_block_for(Some(block_for))?);
        Ok(())
    }
}

/// \brief A copy of `limiter` (same state and metrics) with the deny cache on or off, whatever
/// its backend's `deny_cache`: on, a refusal with `retry_after_us` R is remembered in this
/// process, and until R has passed a check of the same key with at least the refused cost is
/// refused from memory, with no round trip (counted in the metrics' `refused_locally`).
/// `rk_limiter_reset`, `rk_limiter_unblock` and a live override seen by this process end the
/// entries they affect. Only Redis limiters of the counting kinds use it.
///
/// \param limiter The limiter to copy.
/// \param on Whether the copy remembers refusals.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_with_deny_cache(
    limiter: *const rk_limiter,
    on: bool,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        publish(out, limiter.with_deny_cache(on)?);
        Ok(())
    }
}
