//! The calls every limiter answers: check, peek, acquire, release, extend, reset, points_used.
//! All of them block the calling thread (any thread: never one of ratekeeper's own runtime
//! threads, which C code never runs on).

use std::os::raw::c_char;
use std::time::Duration;

use ratekeeper::params::timeout_from_secs;
use ratekeeper::{Decision, Error, Lease};

use crate::args::{arg_opt_str, arg_ref, Out};
use crate::error::{rk_status, Failure};
use crate::limiter::rk_limiter;
use crate::panic::ffi_status;

/// \brief `wait_timeout_secs` value that makes `rk_limiter_acquire` wait for the limiter's
/// default wait timeout (5 s, or the one given to `rk_limiter_new_concurrent`).
pub const RK_WAIT_DEFAULT: f64 = -1.0;

/// \brief One second, as an interval in seconds.
pub const RK_SECOND: f64 = 1.0;
/// \brief One minute, as an interval in seconds.
pub const RK_MINUTE: f64 = 60.0;
/// \brief One hour, as an interval in seconds.
pub const RK_HOUR: f64 = 3600.0;
/// \brief One day, as an interval in seconds.
pub const RK_DAY: f64 = 86400.0;

/// \brief The largest count, cost, limit or capacity accepted: 2^53.
pub const RK_MAX_COUNT: u64 = 9_007_199_254_740_992;

/// \brief A slot held in a concurrent limiter: give it back with `rk_limiter_release`.
///
/// A plain value: copy it freely, store it, send it to another thread or process. Pass it back
/// unchanged; the same limiter and key must release it.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct rk_lease {
    /// High 64 bits of the lease's unique 128-bit id.
    pub id_hi: u64,
    /// Low 64 bits of the lease's unique 128-bit id.
    pub id_lo: u64,
    /// Strictly increases with every grant of the same limiter and key: a resource the limiter
    /// guards can refuse writes carrying a token lower than one it has seen. 0 for a lease
    /// granted while failing open (Redis unreachable), which guards nothing.
    pub fencing_token: u64,
    /// When it was granted, in microseconds since the Unix epoch, by the deciding clock (the
    /// Redis server's for Redis backends).
    pub granted_at_us: u64,
}

impl From<Lease> for rk_lease {
    fn from(lease: Lease) -> Self {
        rk_lease {
            id_hi: (lease.id >> 64) as u64,
            id_lo: lease.id as u64,
            fencing_token: lease.fencing_token,
            granted_at_us: lease.granted_at_micros,
        }
    }
}

impl From<&rk_lease> for Lease {
    fn from(lease: &rk_lease) -> Self {
        Lease::from_parts(
            (u128::from(lease.id_hi) << 64) | u128::from(lease.id_lo),
            lease.fencing_token,
            lease.granted_at_us,
        )
    }
}

/// \brief What `rk_limiter_settle` needs to settle an admitted call with its actual cost, exactly
/// once: set (`settleable`) on admitted calls of counting limiters, all zero otherwise. Pass the
/// whole `rk_decision` back; the fields are for storing it (e.g. in a job's arguments) and
/// rebuilding it: store its seal too (#rk_limiter_seal_ticket) and settle the rebuilt decision
/// with #rk_limiter_settle_sealed, which refuses a ticket altered on the way.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct rk_settle_ticket {
    /// Whether the decision can be settled.
    pub settleable: bool,
    /// The settle id made at check time: a settle of one id applies once.
    pub id: u64,
    /// The cost the call was charged with.
    pub cost: u64,
    /// When it was charged, in microseconds since the epoch, by the deciding clock.
    pub charged_at_us: u64,
    /// Identifies the limiter that made the decision.
    pub limiter: u64,
}

/// \brief The result of a check, peek or acquire: one shape for every limiter.
///
/// Durations are exact, in microseconds, never negative. A refused call consumed nothing.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct rk_decision {
    /// Whether the call was admitted (for `rk_limiter_peek`: whether a call of cost 1 would be).
    pub allowed: bool,
    /// The limit that binds: for multi-limit limiters, the one with the least remaining.
    pub limit: u64,
    /// What is left of `limit` after this call (refused calls and peeks: what is left now).
    pub remaining: u64,
    /// 0 when allowed; otherwise microseconds until the same call could succeed. HTTP
    /// `Retry-After` should round it up to whole seconds.
    pub retry_after_us: u64,
    /// Microseconds until the limiter is back to full for this key.
    pub reset_after_us: u64,
    /// When the decision was made, in microseconds since the Unix epoch, by the deciding clock
    /// (the Redis server's for Redis backends; 0 for the unlimited limiter).
    pub decided_at_us: u64,
    /// Whether `lease` holds a lease: true when a concurrent limiter admitted the call.
    pub has_lease: bool,
    /// The granted lease when `has_lease`; all zero otherwise.
    pub lease: rk_lease,
    /// What `rk_limiter_settle` reads (see #rk_settle_ticket).
    pub settle: rk_settle_ticket,
    /// Shadow mode only: the limiter would have refused this call and admitted it (`allowed`
    /// is true, nothing was consumed, no lease was granted); `remaining` and `retry_after_us`
    /// say what enforcement would have said.
    pub shadow_refused: bool,
}

/// A duration in whole microseconds, saturating (what every `*_us` field holds).
pub(crate) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl From<&Decision> for rk_decision {
    fn from(d: &Decision) -> Self {
        rk_decision {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_us: micros(d.retry_after),
            reset_after_us: micros(d.reset_after),
            decided_at_us: d.decided_at_micros,
            has_lease: d.lease.is_some(),
            lease: d.lease.map(rk_lease::from).unwrap_or_default(),
            settle: d.settle.as_ref().map_or_else(rk_settle_ticket::default, |t| rk_settle_ticket {
                settleable: true,
                id: t.id,
                cost: t.cost,
                charged_at_us: t.charged_at_micros,
                limiter: t.limiter,
            }),
            shadow_refused: d.shadow_refused,
        }
    }
}

/// \brief Consumes `cost` for `key` if the limit allows, never waiting.
///
/// A refused call consumes nothing and still returns #RK_OK: test `decision_out->allowed`.
/// On a concurrent limiter an admitted call holds the lease in `decision_out->lease`; release
/// it with `rk_limiter_release`.
///
/// \param limiter The limiter.
/// \param key The identity limited (a user id, an IP; up to 1 KiB of UTF-8), or NULL for the
///        limiter's single shared key.
/// \param cost What the call consumes (0..=2^53; 0 is always admitted and consumes nothing;
///        concurrent limiters take 1).
/// \param decision_out Receives the decision.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_check(
    limiter: *const rk_limiter,
    key: *const c_char,
    cost: u64,
    decision_out: *mut rk_decision,
) -> rk_status {
    ffi_status! {
        let out = Out::new("decision_out", decision_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        out.write(rk_decision::from(&limiter.check_blocking(key, cost)?));
        Ok(())
    }
}

/// \brief Reports what a call of cost 1 would get, consuming nothing.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param decision_out Receives the decision (never with a lease).
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_peek(
    limiter: *const rk_limiter,
    key: *const c_char,
    decision_out: *mut rk_decision,
) -> rk_status {
    ffi_status! {
        let out = Out::new("decision_out", decision_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        out.write(rk_decision::from(&limiter.peek_blocking(key)?));
        Ok(())
    }
}

/// \brief Consumes `cost`, blocking the calling thread up to `wait_timeout_secs` for the limit
/// to allow it.
///
/// The wait sleeps exactly until the decision can change (or, on a concurrent limiter, until a
/// slot is released); it is not polling. When waiting cannot succeed in time it fails at once.
/// Safe from any thread the caller owns.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param cost What the call consumes (0..=2^53).
/// \param wait_timeout_secs The longest wait in seconds (fractions allowed); 0 never waits;
///        #RK_WAIT_DEFAULT uses the limiter's default (5 s unless set by
///        `rk_limiter_new_concurrent`).
/// \param decision_out Receives the decision on #RK_OK (then `allowed` is true). On
///        #RK_OVER_LIMIT it is written too: `allowed` false, `retry_after_us` the exact time
///        until the call could succeed, every other field 0.
/// \return #RK_OK, #RK_OVER_LIMIT, #RK_NULL_PARAMETER, #RK_INVALID_UTF8,
///         #RK_INVALID_ARGUMENT, #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_acquire(
    limiter: *const rk_limiter,
    key: *const c_char,
    cost: u64,
    wait_timeout_secs: f64,
    decision_out: *mut rk_decision,
) -> rk_status {
    ffi_status! {
        let out = Out::new("decision_out", decision_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        let wait = wait_arg(wait_timeout_secs)?;
        match limiter.acquire_blocking(key, cost, wait) {
            Ok(decision) => {
                out.write(rk_decision::from(&decision));
                Ok(())
            }
            Err(error) => {
                if let Some(refusal) = over_limit_decision(&error) {
                    out.write(refusal);
                }
                Err(Failure::from(error))
            }
        }
    }
}

/// The wait of an acquire: #RK_WAIT_DEFAULT is the limiter's default, anything else a checked
/// timeout naming `wait_timeout`.
pub(crate) fn wait_arg(wait_timeout_secs: f64) -> Result<Option<Duration>, Failure> {
    if wait_timeout_secs == RK_WAIT_DEFAULT {
        Ok(None)
    } else {
        Ok(Some(timeout_from_secs("wait_timeout", wait_timeout_secs)?))
    }
}

/// What an acquire that timed out reports beside #RK_OVER_LIMIT: `allowed` false and the exact
/// `retry_after_us`, every other field 0. None for every other failure.
pub(crate) fn over_limit_decision(error: &Error) -> Option<rk_decision> {
    match error {
        Error::OverLimit { retry_after } => {
            Some(rk_decision { retry_after_us: micros(*retry_after), ..rk_decision::default() })
        }
        _ => None,
    }
}

/// \brief Gives back a lease granted by a concurrent limiter, waking one waiter.
///
/// \param limiter The limiter that granted the lease.
/// \param key The key it was granted for (NULL for the shared key).
/// \param lease The lease, as found in the decision.
/// \return #RK_OK, #RK_LEASE_LOST (it outlived `lock_timeout` and was reclaimed, or the
///         limiter was reset), #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT (not
///         a concurrent limiter), #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_release(
    limiter: *const rk_limiter,
    key: *const c_char,
    lease: *const rk_lease,
) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let lease = Lease::from(arg_ref("lease", lease)?);
        let key = arg_opt_str("key", key)?;
        Ok(limiter.release_blocking(key, &lease)?)
    }
}

/// \brief Renews a lease for another `lock_timeout` from now, so a long task keeps its slot.
///
/// \param limiter The limiter that granted the lease.
/// \param key The key it was granted for (NULL for the shared key).
/// \param lease The lease, as found in the decision.
/// \return #RK_OK, #RK_LEASE_LOST, #RK_NULL_PARAMETER, #RK_INVALID_UTF8,
///         #RK_INVALID_ARGUMENT, #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_extend(
    limiter: *const rk_limiter,
    key: *const c_char,
    lease: *const rk_lease,
) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let lease = Lease::from(arg_ref("lease", lease)?);
        let key = arg_opt_str("key", key)?;
        Ok(limiter.extend_blocking(key, &lease)?)
    }
}

/// \brief Forgets all state of `key`: the next call starts from a full limit. Waiters on a
/// concurrent limiter are woken to check again; its outstanding leases are lost.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_reset(limiter: *const rk_limiter, key: *const c_char) -> rk_status {
    ffi_status! {
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        Ok(limiter.reset_blocking(key)?)
    }
}

/// \brief Corrects an admitted call's charge from `estimate` to `actual` (points, token bucket
/// and leaky limiters): the difference is charged or refunded.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param estimate The cost the call was admitted with (at most the capacity).
/// \param actual What it really cost (up to 2^53; beyond the capacity the excess is charged as
///        debt, at most 16 capacities ahead of now).
/// \param decision_out Receives the state after the correction.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT (also for other
///         limiter kinds), #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT.
#[no_mangle]
pub extern "C" fn rk_limiter_points_used(
    limiter: *const rk_limiter,
    key: *const c_char,
    estimate: u64,
    actual: u64,
    decision_out: *mut rk_decision,
) -> rk_status {
    ffi_status! {
        let out = Out::new("decision_out", decision_out)?;
        let limiter = &arg_ref("limiter", limiter)?.inner;
        let key = arg_opt_str("key", key)?;
        out.write(rk_decision::from(&limiter.points_used_blocking(key, estimate, actual)?));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_may_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<rk_limiter>();
        shareable::<crate::backend::rk_backend>();
    }

    #[test]
    fn max_count_is_the_core_one() {
        assert_eq!(RK_MAX_COUNT, ratekeeper::params::MAX_COUNT);
    }

    #[test]
    fn leases_round_trip_through_c() {
        let lease = Lease::from_parts(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210, 7, 1_700_000_000_000_000);
        let c = rk_lease::from(lease);
        assert_eq!((c.id_hi, c.id_lo), (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210));
        assert_eq!(Lease::from(&c), lease);
    }
}
