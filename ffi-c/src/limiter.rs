//! `rk_limiter` and its constructors, one per limiter of the catalogue.
//!
//! Every parameter is validated by the core (`ratekeeper::params`), so messages name the
//! parameter the same way in every language. Counts are `uint64_t` (1..=2^53); durations are
//! `double` seconds (at least one microsecond once rounded, at most 100 years).

use std::os::raw::c_char;

use ratekeeper::params::{duration_from_secs, timeout_from_secs};
use ratekeeper::{Backend, CalendarPeriod, Limiter, LimiterSpec, SlidingLimit, WindowLimit};

use crate::args::{arg_opt_str, arg_ref, arg_slice, arg_str, write_text, Out};
use crate::backend::rk_backend;
use crate::error::{rk_status, Failure};
use crate::panic::{ffi_boundary, ffi_status};

/// \brief A rate limiter bound to a backend.
///
/// Opaque. Made by an `rk_limiter_new_*` function; freed with `rk_limiter_free`. Thread-safe:
/// one handle may be used from any number of threads at once, including the blocking
/// `rk_limiter_acquire`. Limiters with the same kind and name on the same backend (or on the
/// same Redis, from any process and any language) share state.
#[allow(non_camel_case_types)]
pub struct rk_limiter {
    pub(crate) inner: Limiter,
}

/// \brief One window of a multi-window limiter (`rk_limiter_new_windows`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rk_window_limit {
    /// Admissions allowed in any span of `interval_secs` (1..=2^53).
    pub limit: u64,
    /// The span, in seconds.
    pub interval_secs: f64,
}

/// \brief One limit of a sliding-window limiter (`rk_limiter_new_sliding_window`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rk_sliding_limit {
    /// The span the limit covers, in seconds.
    pub duration_secs: f64,
    /// Units allowed per span (1..=2^53).
    pub limit: u64,
    /// Sub-bucket size in seconds; 0 for none (a plain fixed window aligned to the epoch).
    /// At most 100,000 sub-buckets per limit.
    pub precision_secs: f64,
}

/// Checks the backend, the name and the out-param, then builds the limiter from the spec.
pub(crate) fn build(
    backend: *const rk_backend,
    name: *const c_char,
    limiter_out: *mut *mut rk_limiter,
    spec: impl FnOnce() -> Result<LimiterSpec, Failure>,
) -> Result<(), Failure> {
    let out = Out::new("limiter_out", limiter_out)?;
    let backend: &Backend = &arg_ref("backend", backend)?.inner;
    let name = arg_str("name", name)?;
    let limiter = backend.limiter(name, spec()?)?;
    publish(out, limiter);
    Ok(())
}

pub(crate) fn publish(out: Out<*mut rk_limiter>, inner: Limiter) {
    out.write(Box::into_raw(Box::new(rk_limiter { inner })));
}

/// \brief Creates a concurrent limiter: at most `limit` holders at once (`limit` 1 is a
/// distributed mutex).
///
/// `rk_limiter_check` and `rk_limiter_acquire` grant a lease (in the decision) that must be
/// given back with `rk_limiter_release`. A lease held longer than `lock_timeout_secs` may be
/// reclaimed by a waiter; a waiter wakes within milliseconds of a release.
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param limit Holders allowed at once (1..=2^53).
/// \param lock_timeout_secs How long a lease may be held before it can be reclaimed (Sidekiq's
///        default: 30).
/// \param wait_timeout_secs How long `rk_limiter_acquire` waits by default (with
///        #RK_WAIT_DEFAULT); 0 never waits (Sidekiq's default: 5).
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_concurrent(
    backend: *const rk_backend,
    name: *const c_char,
    limit: u64,
    lock_timeout_secs: f64,
    wait_timeout_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        let backend: &Backend = &arg_ref("backend", backend)?.inner;
        let name = arg_str("name", name)?;
        let lock_timeout = duration_from_secs("lock_timeout", lock_timeout_secs)?;
        let wait_timeout = timeout_from_secs("wait_timeout", wait_timeout_secs)?;
        let limiter = backend.concurrent(name, limit, lock_timeout)?.with_wait_timeout(wait_timeout)?;
        publish(out, limiter);
        Ok(())
    }
}

/// \brief Creates a bucket limiter: `limit` per fixed window of `interval_secs`, windows aligned
/// to multiples of the interval since the Unix epoch (Sidekiq's bucket).
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param limit Units per window (1..=2^53).
/// \param interval_secs The window length in seconds: #RK_SECOND, #RK_MINUTE, #RK_HOUR,
///        #RK_DAY or any other number of seconds.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_bucket(
    backend: *const rk_backend,
    name: *const c_char,
    limit: u64,
    interval_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || {
            Ok(LimiterSpec::Bucket { limit, interval: duration_from_secs("interval", interval_secs)? })
        })
    }
}

/// \brief Creates an exact sliding-window limiter: never more than `limit` admissions in any
/// span of `interval_secs` (Sidekiq's window).
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param limit Admissions per span (1..=2^53).
/// \param interval_secs The span in seconds.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_window(
    backend: *const rk_backend,
    name: *const c_char,
    limit: u64,
    interval_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || {
            let interval = duration_from_secs("interval", interval_secs)?;
            Ok(LimiterSpec::Window { windows: vec![WindowLimit { limit, interval }] })
        })
    }
}

/// \brief Creates a multi-window limiter: several exact sliding windows (e.g. 25 per 5 s AND
/// 300 per 60 s) checked and recorded together.
///
/// The decision reports the window with the least remaining.
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param windows An array of `windows_len` windows (copied; the caller keeps ownership).
/// \param windows_len The number of windows (at least 1).
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_windows(
    backend: *const rk_backend,
    name: *const c_char,
    windows: *const rk_window_limit,
    windows_len: usize,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let windows = arg_slice("windows", windows, windows_len)?;
        build(backend, name, limiter_out, || {
            let mut converted = Vec::with_capacity(windows.len());
            for w in windows {
                converted.push(WindowLimit { limit: w.limit, interval: duration_from_secs("interval", w.interval_secs)? });
            }
            Ok(LimiterSpec::Window { windows: converted })
        })
    }
}

/// \brief Parses a rate string as `limits`, slowapi and flask-limiter write it (`"5/minute"`,
/// `"100 per hour"`, `"25/5s; 300/minute"`) into windows for `rk_limiter_new_windows`, or, for
/// one rate, the `limit` and `interval_secs` of `rk_limiter_new_window` / `rk_limiter_new_bucket`.
///
/// \param rate The rate text (UTF-8): a count, `/` or `per`, a duration with its unit; several
/// separated by `;` or `,`.
/// \param windows_out An array of `windows_capacity` windows that receives the rates.
/// \param windows_capacity How many windows `windows_out` holds; more rates are an error.
/// \param windows_len_out Receives how many rates were parsed.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT naming `rate`
/// (nothing is written then).
#[no_mangle]
pub extern "C" fn rk_parse_rate(
    rate: *const c_char,
    windows_out: *mut rk_window_limit,
    windows_capacity: usize,
    windows_len_out: *mut usize,
) -> rk_status {
    ffi_status! {
        let text = arg_str("rate", rate)?;
        let len_out = Out::new("windows_len_out", windows_len_out)?;
        if windows_out.is_null() {
            return Err(Failure::null("windows_out"));
        }
        let rates = ratekeeper::parse_rates("rate", text)?;
        if rates.len() > windows_capacity {
            return Err(ratekeeper::Error::invalid(
                "rate",
                format!("holds {} rates, more than windows_capacity ({windows_capacity})", rates.len()),
            )
            .into());
        }
        for (i, r) in rates.iter().enumerate() {
            let w = rk_window_limit { limit: r.limit, interval_secs: r.interval.as_secs_f64() };
            // SAFETY: the caller's contract: `windows_out` holds `windows_capacity` windows, and
            // `i` < rates.len() <= windows_capacity.
            unsafe { windows_out.add(i).write(w) };
        }
        len_out.write(rates.len());
        Ok(())
    }
}

/// \brief Creates a sliding-window limiter of several `(duration, limit, precision)` limits over
/// sub-buckets, checked atomically; only admitted calls count (Carlson's).
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param limits An array of `limits_len` limits (copied; the caller keeps ownership).
/// \param limits_len The number of limits (at least 1).
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_sliding_window(
    backend: *const rk_backend,
    name: *const c_char,
    limits: *const rk_sliding_limit,
    limits_len: usize,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let limits = arg_slice("limits", limits, limits_len)?;
        build(backend, name, limiter_out, || {
            let mut converted = Vec::with_capacity(limits.len());
            for l in limits {
                let precision = if l.precision_secs == 0.0 {
                    None
                } else {
                    Some(duration_from_secs("precision", l.precision_secs)?)
                };
                converted.push(SlidingLimit {
                    duration: duration_from_secs("duration", l.duration_secs)?,
                    limit: l.limit,
                    precision,
                });
            }
            Ok(LimiterSpec::SlidingWindow { limits: converted })
        })
    }
}

/// \brief Creates a token bucket: refills `rate` tokens per second up to `capacity`; a call
/// asks for `cost` tokens (Stripe's request rate limiter).
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param rate Tokens per second: finite, above 0, at most 1,000,000.
/// \param capacity The burst size (1..=2^53).
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_token_bucket(
    backend: *const rk_backend,
    name: *const c_char,
    rate: f64,
    capacity: u64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || Ok(LimiterSpec::TokenBucket { rate, capacity }))
    }
}

/// \brief Creates a leased token bucket: `rate` tokens per second up to `capacity`, shared by
/// every process on the backend; this process takes tokens from Redis in leases of up to
/// `chunk` and spends them in-process. Unspent tokens go back on `rk_limiter_close` or at the
/// next lease, or lapse `lease_ttl_secs` after they were taken. The fleet admits at most capacity + rate ×
/// (span + lease_ttl) over any span; leasing ahead may under-use it. On the memory backend: the token bucket.
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param rate Tokens per second: finite, above 0, at most 1,000,000.
/// \param capacity The burst size (1..=2^53).
/// \param chunk The most tokens one lease takes (at most `capacity`); 0 for the default,
///        capacity / 16 (at least 1).
/// \param lease_ttl_secs How long a lease's tokens may be spent; 0 for the default (1 s).
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_leased(
    backend: *const rk_backend,
    name: *const c_char,
    rate: f64,
    capacity: u64,
    chunk: u64,
    lease_ttl_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || {
            let lease_ttl = if lease_ttl_secs == 0.0 {
                ratekeeper::DEFAULT_LEASED_LEASE_TTL
            } else {
                duration_from_secs("lease_ttl", lease_ttl_secs)?
            };
            Ok(LimiterSpec::Leased { rate, capacity, chunk: (chunk != 0).then_some(chunk), lease_ttl })
        })
    }
}

/// \brief Creates a leaky bucket: a burst of `size`, then one call per `drain_secs / size`;
/// after `drain_secs` idle the full burst is back (Sidekiq's leaky).
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param size The burst size (1..=2^53).
/// \param drain_secs Seconds for a full bucket to drain.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_leaky(
    backend: *const rk_backend,
    name: *const c_char,
    size: u64,
    drain_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || {
            Ok(LimiterSpec::Leaky { size, drain: duration_from_secs("drain", drain_secs)? })
        })
    }
}

/// \brief Creates a points limiter: a leaky bucket of `capacity` points refilled completely in
/// `refill_secs`; a call gives an estimate that `rk_limiter_points_used` corrects (Sidekiq's
/// points, e.g. GraphQL query cost).
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param capacity Points in a full bucket (1..=2^53).
/// \param refill_secs Seconds for an empty bucket to refill completely.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_points(
    backend: *const rk_backend,
    name: *const c_char,
    capacity: u64,
    refill_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || {
            Ok(LimiterSpec::Points { capacity, refill: duration_from_secs("refill", refill_secs)? })
        })
    }
}

/// \brief Creates a calendar quota: at most `limit` per calendar day, ISO week (from Monday),
/// month or year in an IANA time zone (DST-aware: a day may last 23 or 25 hours).
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param limit Units per period (1..=2^53).
/// \param period `"day"`, `"week"`, `"month"` or `"year"`.
/// \param tz An IANA time zone name such as `"Europe/Berlin"`; NULL is `"UTC"`.
/// \param anchor Monthly periods start on this day (1-31, clamped to the month's last day);
/// 0 is the default (1). Other periods take 0 only.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_new_calendar(
    backend: *const rk_backend,
    name: *const c_char,
    limit: u64,
    period: *const c_char,
    tz: *const c_char,
    anchor: u32,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        build(backend, name, limiter_out, || {
            let period = CalendarPeriod::parse(arg_str("period", period)?)?;
            let tz = arg_opt_str("tz", tz)?.unwrap_or("UTC").to_owned();
            let anchor = (anchor != 0).then(|| anchor.min(255) as u8);
            Ok(LimiterSpec::Calendar { limit, period, tz, anchor })
        })
    }
}

/// \brief Creates a limiter from its spec as data: JSON text, durations in seconds, the same in
/// every language, e.g. `{"kind":"token_bucket","rate":10,"capacity":20}` (see the README's
/// "Specs as data"). A `wait_timeout` field sets the default wait of `rk_limiter_acquire`.
///
/// \param backend The backend that holds the state.
/// \param name The limiter's name: 1 to 128 characters from `[A-Za-z0-9_-]`.
/// \param json The spec, NUL-terminated UTF-8.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT (the message
///         names the bad field by its path, e.g. `windows[1]`).
#[no_mangle]
pub extern "C" fn rk_limiter_new_from_json(
    backend: *const rk_backend,
    name: *const c_char,
    json: *const c_char,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        let backend = arg_ref("backend", backend)?;
        let name = arg_str("name", name)?;
        let json = arg_str("json", json)?;
        publish(out, backend.inner.limiter_from_json(name, json)?);
        Ok(())
    }
}

/// \brief Copies a limiter's spec, as canonical JSON, into `buf`.
///
/// The canonical form is the same in every language: keys in a fixed order, every field of the
/// kind filled in, whole numbers without a fraction, durations in seconds.
///
/// Like `snprintf` (and `rk_last_error_message`): writes at most `len - 1` bytes followed by a
/// NUL, and stores the full length (excluding the NUL) in `*out_n`, so a call with `buf = NULL`
/// and `len = 0` measures it.
///
/// \param limiter The limiter.
/// \param buf Where to write the JSON; may be NULL only when `len` is 0.
/// \param len The size of `buf` in bytes.
/// \param out_n Receives the full length of the JSON in bytes, excluding the NUL.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_spec_json(
    limiter: *const rk_limiter,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> rk_status {
    ffi_status! {
        let limiter = arg_ref("limiter", limiter)?;
        write_text(buf, len, out_n, &limiter.inner.spec_json())
    }
}

/// \brief The most one call may cost: the burst, the smallest limit, the slot count; 2^53
/// (#RK_MAX_COUNT) for an unlimited limiter. A larger cost is refused on every call.
///
/// \param limiter The limiter.
/// \param capacity_out Receives the capacity.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_capacity(limiter: *const rk_limiter, capacity_out: *mut u64) -> rk_status {
    ffi_status! {
        let out = Out::new("capacity_out", capacity_out)?;
        out.write(arg_ref("limiter", limiter)?.inner.capacity());
        Ok(())
    }
}

/// \brief Whether a charge can be given back with `rk_limiter_points_used` (estimate → 0):
/// true for token bucket, leaky and points limiters. The HTTP middleware's `count` charges these
/// before the response and refunds after; the others it peeks before and charges after.
///
/// \param limiter The limiter.
/// \param refundable_out Receives whether it is refundable.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_refundable(limiter: *const rk_limiter, refundable_out: *mut bool) -> rk_status {
    ffi_status! {
        let out = Out::new("refundable_out", refundable_out)?;
        out.write(arg_ref("limiter", limiter)?.inner.refundable());
        Ok(())
    }
}

/// \brief The span the limiter's quota covers, where its kind has one window (bucket, window
/// with one window, token bucket: capacity / rate, leaky, points): draft-11's `w`.
///
/// \param limiter The limiter.
/// \param window_us_out Receives the window in microseconds; 0 when the kind has none.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_window(limiter: *const rk_limiter, window_us_out: *mut u64) -> rk_status {
    ffi_status! {
        let out = Out::new("window_us_out", window_us_out)?;
        let window = arg_ref("limiter", limiter)?.inner.window();
        out.write(window.map_or(0, |w| w.as_micros() as u64));
        Ok(())
    }
}

/// \brief Creates a limiter that always allows and touches no backend (admins, tests).
///
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_new_unlimited(limiter_out: *mut *mut rk_limiter) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        publish(out, Limiter::unlimited());
        Ok(())
    }
}

/// \brief Creates a copy of `limiter` (same state) to which the backend's failure policy
/// applies (`allow` true) or not (`allow` false: it fails closed while Redis is unreachable).
///
/// Every limiter allows it by default except concurrent limiters: under #RK_FAIL_OPEN or
/// #RK_FALLBACK they fail closed unless they opt in with this call. Opted in, `fail_open` grants
/// leases that guard nothing (fencing token 0) and `fallback` an in-process limiter (a limit per
/// process, its fencing tokens increasing within the process only).
///
/// \param limiter The limiter to copy.
/// \param allow Whether the backend's `fail_open` / `fallback` policy applies to the copy.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_with_allow_fallback(
    limiter: *const rk_limiter,
    allow: bool,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        publish(out, limiter.with_allow_fallback(allow)?);
        Ok(())
    }
}

/// \brief Creates a copy of `limiter` (same state and metrics) in shadow mode (`shadow` true)
/// or enforcing (`shadow` false).
///
/// In shadow mode a call the limit would refuse is admitted: the decision has `allowed` and
/// `shadow_refused` true, nothing is consumed, `remaining` and `retry_after_us` say what
/// enforcement would have said; `rk_limiter_acquire` never waits and a concurrent limiter grants
/// no lease to it (there is nothing to release). A live override of the limiter or of a key
/// decides instead, with the `shadow` field of its spec. Counted in the metrics'
/// `shadow_refused`. A spec given as JSON may say `"shadow": true` instead.
///
/// \param limiter The limiter to copy.
/// \param shadow Whether the copy is in shadow mode.
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_limiter_with_shadow(
    limiter: *const rk_limiter,
    shadow: bool,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        publish(out, limiter.with_shadow(shadow)?);
        Ok(())
    }
}

/// \brief A copy of `limiter` (same state and metrics) whose pauses last at most
/// `max_pause_secs` (default one hour): a longer pause asked of `rk_limiter_pause` or
/// `rk_limiter_observe` is shortened to it and counted in the metrics' `pauses_clamped`.
///
/// \param limiter The limiter to copy.
/// \param max_pause_secs The longest pause in seconds (at least one microsecond, at most 100
///        years; 0, negative and NaN are #RK_INVALID_ARGUMENT naming `max_pause`).
/// \param limiter_out Receives the new limiter; free it with `rk_limiter_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_limiter_with_max_pause(
    limiter: *const rk_limiter,
    max_pause_secs: f64,
    limiter_out: *mut *mut rk_limiter,
) -> rk_status {
    ffi_status! {
        let out = Out::new("limiter_out", limiter_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let max_pause = duration_from_secs("max_pause", max_pause_secs)?;
        publish(out, limiter.with_max_pause(max_pause)?);
        Ok(())
    }
}

/// \brief Frees a limiter. NULL is ignored.
///
/// Call it once per limiter, when no other thread is using this handle. Leases it granted are
/// not released (on Redis they are reclaimed after `lock_timeout`).
///
/// \param limiter A limiter from an `rk_limiter_new_*` function, or NULL.
#[no_mangle]
pub extern "C" fn rk_limiter_free(limiter: *mut rk_limiter) {
    ffi_boundary! {
        if !limiter.is_null() {
            // SAFETY: the caller's contract: made by `publish`, not freed before.
            drop(unsafe { Box::from_raw(limiter) });
        }
    }
}
