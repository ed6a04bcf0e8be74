//! The results JavaScript receives: decisions, leases, metrics, backend statistics. Durations
//! are milliseconds (fractional: exact to the microsecond), instants are microseconds since the
//! epoch (exact in a JavaScript number until the year 2255).

use napi::Env;
use napi_derive::napi;

use crate::args::Js;
use crate::runtime::CoreResult;

fn ms(d: std::time::Duration) -> f64 {
    d.as_micros() as f64 / 1e3
}

/// The outcome of a `check`, `peek` or `acquire`. A refused call consumed nothing.
#[napi(object, object_from_js = false)]
pub struct Decision {
    /// Whether the call was admitted (for `peek`: whether a call of cost 1 would be).
    pub allowed: bool,
    /// The limit that binds: for multi-limit limiters, the one with the least remaining
    /// (2^53 for `unlimited`).
    pub limit: f64,
    /// What is left of `limit` after this call (for refused calls and `peek`: what is left now).
    pub remaining: f64,
    /// 0 when allowed; otherwise the milliseconds until the same call could succeed.
    pub retry_after_ms: f64,
    /// Milliseconds until the limiter is back to full for this key.
    pub reset_after_ms: f64,
    /// When the decision was made, in microseconds since the epoch, by the deciding clock: the
    /// Redis server's for Redis backends (so decisions of different processes compare), the
    /// backend's clock for memory, 0 for `unlimited`.
    pub decided_at_us: f64,
    /// The lease granted by a concurrent limiter: give it back with `limiter.release(lease)`.
    pub lease: Option<Lease>,
    /// One entry per limit, in configuration order, for multi-limit limiters (`windows`,
    /// `slidingWindow` with several limits).
    pub limits: Option<Vec<LimitStatus>>,
    /// What `limiter.settle` reads: set on admitted calls of counting limiters, else absent.
    pub settle: Option<crate::settle::SettleTicket>,
    /// Shadow mode only: the limiter would have refused this call and admitted it (`allowed`
    /// is true, nothing was consumed, no lease was granted); `remaining` and `retryAfterMs` say
    /// what enforcement would have said.
    pub shadow_refused: bool,
}

/// The state of one limit of a multi-limit limiter.
#[napi(object, object_from_js = false)]
pub struct LimitStatus {
    /// The span this limit covers, in milliseconds.
    pub window_ms: f64,
    /// The limit's size.
    pub limit: f64,
    /// What is left of it.
    pub remaining: f64,
    /// 0 if this limit admits the call; otherwise the milliseconds until it would.
    pub retry_after_ms: f64,
    /// Milliseconds until this limit is back to full.
    pub reset_after_ms: f64,
}

/// A slot held in a concurrent limiter.
#[napi(object, object_from_js = false)]
pub struct Lease {
    /// Unique id of this grant: 32 hexadecimal digits (a 128-bit number).
    pub id: String,
    /// Strictly increases with every grant of the same limiter and key: a resource guarded by the
    /// limiter can refuse writes carrying a token lower than one it has seen. 0 for a lease
    /// granted while failing open (Redis unreachable), which guards nothing.
    pub fencing_token: f64,
    /// When it was granted, in microseconds since the epoch, by the deciding clock.
    pub granted_at_us: f64,
    /// The key it was granted for (absent for the limiter's shared key).
    pub key: Option<String>,
}

impl Lease {
    /// The JavaScript form of a core lease granted for `key`.
    pub fn new(l: ratekeeper::Lease, key: Option<&str>) -> Lease {
        Lease {
            id: format!("{:032x}", l.id),
            fencing_token: l.fencing_token as f64,
            granted_at_us: l.granted_at_micros as f64,
            key: key.map(str::to_owned),
        }
    }
}

impl Decision {
    /// The JavaScript form of a core decision made for `key`.
    pub fn new(d: ratekeeper::Decision, key: Option<&str>) -> Decision {
        Decision {
            allowed: d.allowed,
            limit: d.limit as f64,
            remaining: d.remaining as f64,
            retry_after_ms: ms(d.retry_after),
            reset_after_ms: ms(d.reset_after),
            decided_at_us: d.decided_at_micros as f64,
            lease: d.lease.map(|l| Lease::new(l, key)),
            limits: d.limits.map(|limits| {
                limits
                    .iter()
                    .map(|l| LimitStatus {
                        window_ms: ms(l.window),
                        limit: l.limit as f64,
                        remaining: l.remaining as f64,
                        retry_after_ms: ms(l.retry_after),
                        reset_after_ms: ms(l.reset_after),
                    })
                    .collect()
            }),
            settle: d.settle.as_ref().map(crate::settle::SettleTicket::new),
            shadow_refused: d.shadow_refused,
        }
    }
}

/// Reads a lease given back by JavaScript: `(key, core lease)`.
pub fn lease_from_js(value: Option<Js>) -> CoreResult<(Option<String>, ratekeeper::Lease)> {
    let bad = |why: &str| ratekeeper::Error::invalid("lease", format!("must be a lease from a decision: {why}"));
    let obj = crate::args::required(value, "lease")?.object("lease")?;
    let id = obj.get(c"id").ok_or_else(|| bad("no `id`"))?.string("lease")?;
    let id = u128::from_str_radix(&id, 16).map_err(|_| bad("`id` is not 32 hexadecimal digits"))?;
    let whole = |name: &std::ffi::CStr| -> CoreResult<u64> {
        let n = obj.get(name).map(|v| v.number("lease")).transpose()?.unwrap_or(0.0);
        if !(n.is_finite() && n >= 0.0 && n.fract() == 0.0) {
            return Err(bad("`fencingToken` and `grantedAtUs` must be whole numbers"));
        }
        Ok(n as u64)
    };
    let fencing_token = whole(c"fencingToken")?;
    let granted_at = whole(c"grantedAtUs")?;
    let key = obj.get(c"key").map(|k| k.string("key")).transpose()?;
    Ok((key, ratekeeper::Lease::from_parts(id, fencing_token, granted_at)))
}

/// A limiter's metrics (this process's, or with `fleetMetrics()` every process's): its checks by
/// outcome, their latency on Redis, and for concurrent limiters Sidekiq's set.
#[napi(object, object_from_js = false)]
pub struct Metrics {
    /// Checks the backend allowed (each attempt of a waiting `acquire` counts).
    pub allowed: f64,
    /// Checks the backend refused.
    pub refused: f64,
    /// Checks that failed because Redis failed or refused the call.
    pub errors: f64,
    /// Checks allowed because Redis failed, under `failurePolicy: 'fail_open'`.
    pub failed_open: f64,
    /// Checks the in-memory fallback answered, under `failurePolicy: { fallback: n }`.
    pub fell_back: f64,
    /// Checks that went to Redis and were timed (none on the memory backend).
    pub latency_count: f64,
    /// Their total client-side latency (milliseconds).
    pub latency_sum_ms: f64,
    /// Leases granted (blocks run).
    pub held: f64,
    /// Total time leases were held, measured at release (milliseconds).
    pub held_time_ms: f64,
    /// Leases granted without waiting.
    pub immediate: f64,
    /// Leases granted after waiting.
    pub waited: f64,
    /// Total time spent waiting by the leases granted after waiting (milliseconds).
    pub wait_time_ms: f64,
    /// Leases released after their lock timeout (including those already reclaimed).
    pub overages: f64,
    /// Overdue leases reclaimed for a new caller.
    pub reclaimed: f64,
    /// Pauses (`pause`, `observe`) shortened to the limiter's `maxPauseMs`.
    pub pauses_clamped: f64,
    /// Checks refused by a block (`blockForMs` after a refusal, or `block` by hand) rather than
    /// by the limiter's state; also counted in `refused`.
    pub blocked: f64,
    /// Checks a limiter in shadow mode would have refused and admitted instead (counted in
    /// neither `allowed` nor `refused`).
    pub shadow_refused: f64,
    /// Checks a Redis limiter refused from its deny cache, with no round trip; also counted in
    /// `refused`.
    pub refused_locally: f64,
    /// Settles applied (`settle`); a repeat of one already applied is not counted.
    pub settles: f64,
    /// Units the applied settles charged (calls that cost more than checked).
    pub settle_charged: f64,
    /// Units the applied settles asked to refund (calls that cost less than checked); a kind's
    /// rule may give back less.
    pub settle_refunded: f64,
    /// Registrations (about one a minute) that found the name used with another spec by a live
    /// process on the same Redis (one name, two limits; see `onConflict`).
    pub spec_conflicts: f64,
    /// Checks refused by a pause (`pause`, `observe`) rather than by the limiter's state; also
    /// counted in `refused`.
    pub paused: f64,
    /// Leases given back by a release (including one already reclaimed).
    pub released: f64,
    /// Leases this process was granted and has not released (`held - released`).
    pub leases_held: f64,
}

impl From<ratekeeper::Metrics> for Metrics {
    fn from(m: ratekeeper::Metrics) -> Self {
        Metrics {
            allowed: m.allowed as f64,
            refused: m.refused as f64,
            errors: m.errors as f64,
            failed_open: m.failed_open as f64,
            fell_back: m.fell_back as f64,
            latency_count: m.latency_count() as f64,
            latency_sum_ms: ms(m.latency_sum),
            held: m.held as f64,
            held_time_ms: ms(m.held_time),
            immediate: m.immediate as f64,
            waited: m.waited as f64,
            wait_time_ms: ms(m.wait_time),
            overages: m.overages as f64,
            reclaimed: m.reclaimed as f64,
            pauses_clamped: m.pauses_clamped as f64,
            blocked: m.blocked as f64,
            shadow_refused: m.shadow_refused as f64,
            refused_locally: m.refused_locally as f64,
            settles: m.settles as f64,
            settle_charged: m.settle_charged as f64,
            settle_refunded: m.settle_refunded as f64,
            spec_conflicts: m.spec_conflicts as f64,
            paused: m.paused as f64,
            released: m.released as f64,
            leases_held: m.leases_held() as f64,
        }
    }
}

/// What a Redis backend's failure policy has done so far (all 0 for memory backends).
#[napi(object, object_from_js = false)]
pub struct BackendStats {
    /// Calls allowed because Redis failed under `failurePolicy: 'fail_open'`.
    pub failed_open: f64,
    /// Calls answered by the in-memory fallback under `failurePolicy: { fallback: n }`.
    pub fell_back: f64,
    /// Calls that failed because Redis failed under `failurePolicy: 'fail_closed'`.
    pub failed: f64,
    /// Calls Redis refused (`ERR_BACKEND_REJECTED`: a missing permission, a wrong password,
    /// memory full, a script error), under any policy: none was admitted.
    pub rejected: f64,
    /// Calls of a counting limiter that found the key's state last recorded by another
    /// configuration of the same name (e.g. a rolling deploy changing a limit).
    pub config_mismatches: f64,
}

impl From<ratekeeper::BackendStats> for BackendStats {
    fn from(s: ratekeeper::BackendStats) -> Self {
        BackendStats {
            failed_open: s.failed_open as f64,
            fell_back: s.fell_back as f64,
            failed: s.failed as f64,
            rejected: s.rejected as f64,
            config_mismatches: s.config_mismatches as f64,
        }
    }
}

/// Milliseconds (as a decision or error holds them) as a duration: exact to the microsecond;
/// negative or not a number is zero.
pub(crate) fn duration_of_ms(ms: f64) -> std::time::Duration {
    std::time::Duration::from_micros((ms * 1e3).round().max(0.0) as u64)
}

/// Internal (http.js): milliseconds as HTTP headers give them, by the core's rule (whole
/// seconds, rounded up).
#[napi(skip_typescript)]
pub fn http_seconds(ms: f64) -> f64 {
    ratekeeper::http_seconds(duration_of_ms(ms)) as f64
}

/// Internal (http.js): the core's rate-limit headers for a decision given as its plain values,
/// in order, as `[name, value, name, value, …]`.
#[napi(skip_typescript)]
#[allow(clippy::too_many_arguments)] // a decision's plain values, in order, and the two options
pub fn http_headers(
    env: Env,
    allowed: bool,
    limit: f64,
    remaining: f64,
    retry_after_ms: f64,
    reset_after_ms: f64,
    form: Option<String>,
    policy: Option<String>,
) -> napi::Result<Vec<String>> {
    let decision = ratekeeper::Decision::from_parts(
        allowed,
        limit.max(0.0) as u64,
        remaining.max(0.0) as u64,
        duration_of_ms(retry_after_ms),
        duration_of_ms(reset_after_ms),
    );
    let form = match form.as_deref() {
        None => ratekeeper::HeaderForm::Draft11,
        Some(name) => crate::error::core(&env, ratekeeper::HeaderForm::from_name("form", name))?,
    };
    Ok(decision
        .rate_limit_headers(form, policy.as_deref().unwrap_or("default"))
        .into_iter()
        .flat_map(|(name, value)| [name.to_owned(), value])
        .collect())
}
