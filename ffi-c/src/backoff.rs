//! `rk_backoff`: the core's reschedule policy for over-limit jobs (Sidekiq's), for job systems
//! written against the C ABI (the Python and Node worker integrations use the same core type).

use std::time::Duration;

use ratekeeper::params::timeout_from_secs;
use ratekeeper::Backoff;

use crate::args::{arg_ref, Out};
use crate::error::rk_status;
use crate::panic::{ffi_boundary, ffi_status};

/// \brief When to run an over-limit job again, and when to give up (Sidekiq's policy).
///
/// Opaque. Made by `rk_backoff_new`, freed with `rk_backoff_free`. Thread-safe (the jitter's
/// generator is behind a lock). Reschedule `n` (1 for the first, counted apart from the job's
/// own retries) waits `max(retry_after, base * n)` plus a random `[0, jitter)`; after
/// `max_reschedules` reschedules the job should fail with the over-limit error instead.
#[allow(non_camel_case_types)]
pub struct rk_backoff {
    inner: Backoff,
}

/// \brief Creates a backoff policy. Sidekiq's default is `base` 300, `jitter` 300,
/// `max_reschedules` 20 (`300 * n + rand(300)` seconds, about a day in all).
///
/// \param base The step per reschedule, in seconds (0 allowed; at most 100 years).
/// \param jitter The largest random spread added to each delay, in seconds (0 allowed).
/// \param max_reschedules How many times a job is rescheduled before it fails.
/// \param seed Seeds the jitter's generator (tests: the same delays on every run); 0 for a
///        random seed.
/// \param backoff_out Receives the new policy; free it with `rk_backoff_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, or #RK_INVALID_ARGUMENT naming `base` or `jitter`.
#[no_mangle]
pub extern "C" fn rk_backoff_new(
    base: f64,
    jitter: f64,
    max_reschedules: u32,
    seed: u64,
    backoff_out: *mut *mut rk_backoff,
) -> rk_status {
    ffi_status! {
        let out = Out::new("backoff_out", backoff_out)?;
        let base = timeout_from_secs("base", base)?;
        let jitter = timeout_from_secs("jitter", jitter)?;
        let mut inner = Backoff::new(base, jitter, max_reschedules)?;
        if seed != 0 {
            inner = inner.with_seed(seed);
        }
        out.write(Box::into_raw(Box::new(rk_backoff { inner })));
        Ok(())
    }
}

/// \brief How long to wait before running the job again for its reschedule `attempt`.
///
/// \param backoff The policy.
/// \param attempt The reschedule about to be made: 1 for the first.
/// \param retry_after_us What the limiter asked for, in microseconds (an `rk_decision`'s
///        `retry_after_us`, taken as is so no conversion is needed): the delay is never shorter.
/// \param reschedule_out Receives true when the job should be rescheduled, false when
///        `attempt > max_reschedules` (the job should fail with the over-limit error).
/// \param delay_us_out Receives the delay in microseconds (0 when not rescheduling).
/// \return #RK_OK, #RK_NULL_PARAMETER, or #RK_INVALID_ARGUMENT naming `attempt` (0) or
///         `retry_after` (over 100 years).
#[no_mangle]
pub extern "C" fn rk_backoff_reschedule_in(
    backoff: *const rk_backoff,
    attempt: u32,
    retry_after_us: u64,
    reschedule_out: *mut bool,
    delay_us_out: *mut u64,
) -> rk_status {
    ffi_status! {
        let backoff = arg_ref("backoff", backoff)?;
        let reschedule = Out::new("reschedule_out", reschedule_out)?;
        let delay = Out::new("delay_us_out", delay_us_out)?;
        let result = backoff.inner.reschedule_in(attempt, Duration::from_micros(retry_after_us))?;
        reschedule.write(result.is_some());
        delay.write(result.map_or(0, |d| d.as_micros() as u64));
        Ok(())
    }
}

/// \brief Frees a backoff policy. NULL is ignored.
///
/// \param backoff A policy from `rk_backoff_new`, or NULL.
#[no_mangle]
pub extern "C" fn rk_backoff_free(backoff: *mut rk_backoff) {
    ffi_boundary! {
        if !backoff.is_null() {
            // SAFETY: the caller's contract: made by `rk_backoff_new`, not freed before.
            drop(unsafe { Box::from_raw(backoff) });
        }
    }
}
