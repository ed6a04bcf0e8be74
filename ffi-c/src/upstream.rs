//! Upstream feedback: pause a limiter and key when a third party answers 429 or 503, for as
//! long as it asked up to the limiter's `max_pause` (`rk_limiter_pause`, `rk_limiter_observe`),
//! and end a pause early (`rk_limiter_resume`).

use std::borrow::Cow;
use std::ffi::CStr;
use std::os::raw::c_char;

use ratekeeper::params::{duration_from_secs, status_from_f64};

use crate::args::{arg_opt_str, arg_ref, arg_slice};
use crate::error::{rk_status, Failure};
use crate::limiter::rk_limiter;
use crate::panic::ffi_status;

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Writes `value` to an optional out-param (NULL: the caller does not want it).
fn write_opt(out: *mut u64, value: u64) {
    // SAFETY: the caller's contract: NULL, or aligned and writable.
    if let Some(out) = unsafe { out.as_mut() } {
        *out = value;
    }
}

/// \brief Pauses `key` for `duration_secs`: until the pause ends, every check and peek of this
/// limiter and key, in every process sharing the backend, is refused with `retry_after_us` =
/// the remaining pause (consuming nothing), and `rk_limiter_acquire` waits it out.
///
/// A pause lasts at most the limiter's `max_pause` (one hour unless set with
/// `rk_limiter_with_max_pause`). A longer pause extends the one in effect; a shorter one never
/// shortens it. On Redis the pause is one key with a TTL equal to the pause, checked inside
/// each call's script (no extra round trip). `rk_limiter_resume` ends it; `rk_limiter_reset`
/// forgets it with the rest of the key's state.
///
/// \param limiter The limiter.
/// \param key The identity paused, or NULL for the limiter's single shared key.
/// \param duration_secs The pause in seconds (fractions allowed; at least one microsecond, at
///        most 100 years; 0, negative and NaN are #RK_INVALID_ARGUMENT naming `duration`).
/// \param in_effect_us_out Receives the pause in effect after the call, in microseconds (at
///        least `duration_secs`); may be NULL.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_pause(
    limiter: *const rk_limiter,
    key: *const c_char,
    duration_secs: f64,
    in_effect_us_out: *mut u64,
) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        let duration = duration_from_secs("duration", duration_secs)?;
        let in_effect = limiter.pause_blocking(key, duration)?;
        write_opt(in_effect_us_out, micros(in_effect));
        Ok(())
    }
}

/// \brief Reads an upstream response's status and headers and pauses `key` (see
/// `rk_limiter_pause`) for as long as a 429 or 503 asks: `Retry-After` (seconds or HTTP-date),
/// else `RateLimit-Reset` when `RateLimit-Remaining` is 0, else `X-RateLimit-Reset` (epoch or
/// delta seconds), up to the limiter's `max_pause` (see `rk_limiter_with_max_pause`: a
/// `Retry-After` of decades pauses for one hour by default).
///
/// Header names are compared case-insensitively; malformed values are ignored (never an error).
/// Names and values are read as UTF-8, invalid bytes replaced (HTTP/1.1 may carry Latin-1).
///
/// \param limiter The limiter.
/// \param key The identity to pause, or NULL for the limiter's single shared key.
/// \param status The HTTP status code (100..=999, else #RK_INVALID_ARGUMENT naming `status`).
/// \param header_names `headers_len` NUL-terminated header names (NULL when `headers_len` is 0).
/// \param header_values `headers_len` NUL-terminated header values, in the same order.
/// \param headers_len How many headers.
/// \param pause_us_out Receives the pause in effect after the call in microseconds, or 0 when
///        the response asks for no pause (nothing is written to the backend then); may be NULL.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 (the key), #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_observe(
    limiter: *const rk_limiter,
    key: *const c_char,
    status: u32,
    header_names: *const *const c_char,
    header_values: *const *const c_char,
    headers_len: usize,
    pause_us_out: *mut u64,
) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        let status = status_from_f64("status", f64::from(status))?;
        let names = arg_slice("header_names", header_names, headers_len)?;
        let values = arg_slice("header_values", header_values, headers_len)?;
        let text = |parameter: &str, i: usize, ptr: *const c_char| -> Result<Cow<'_, str>, Failure> {
            if ptr.is_null() {
                return Err(Failure::null(&format!("{parameter}[{i}]")));
            }
            // SAFETY: the caller's contract: each non-NULL element is a NUL-terminated string
            // that stays valid for the duration of the call.
            Ok(unsafe { CStr::from_ptr(ptr) }.to_string_lossy())
        };
        let headers = names
            .iter()
            .zip(values)
            .enumerate()
            .map(|(i, (name, value))| Ok((text("header_names", i, *name)?, text("header_values", i, *value)?)))
            .collect::<Result<Vec<_>, Failure>>()?;
        let pause = limiter.observe_blocking(key, status, &headers)?;
        write_opt(pause_us_out, pause.map_or(0, micros));
        Ok(())
    }
}

/// \brief Ends the pause of `key` now, in every process sharing the backend (an operator's
/// override of a pause that is wrong or no longer needed); the key's other state is kept.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param was_paused_out Receives whether a pause was in effect; may be NULL.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_resume(
    limiter: *const rk_limiter,
    key: *const c_char,
    was_paused_out: *mut bool,
) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        let was_paused = limiter.resume_blocking(key)?;
        // SAFETY: the caller's contract: NULL, or aligned and writable.
        if let Some(out) = unsafe { was_paused_out.as_mut() } {
            *out = was_paused;
        }
        Ok(())
    }
}
