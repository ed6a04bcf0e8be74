//! The one result shape every limiter returns.

use std::time::Duration;

use crate::http::{http_seconds, sf_string, HeaderForm};

/// The outcome of a `check`, `peek` or `acquire`.
///
/// Durations are exact to the microsecond and never negative. A refused call consumed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the call was admitted (for `peek`: whether a call of cost 1 would be).
    pub allowed: bool,
    /// The limit that binds: for multi-limit limiters, the one with the least remaining.
    pub limit: u64,
    /// What is left of `limit` after this call (for refused calls and `peek`: what is left now).
    pub remaining: u64,
    /// Zero when allowed; otherwise the time until the same call could succeed.
    pub retry_after: Duration,
    /// Time until the limiter is back to full for this key.
    pub reset_after: Duration,
    /// The lease granted by a concurrent limiter; release it when done.
    pub lease: Option<Lease>,
    /// When the decision was made, in microseconds since the epoch, by the deciding clock: the
    /// Redis server's for Redis backends, the backend's clock for memory (0 for unlimited).
    pub decided_at_micros: u64,
    /// One entry per limit, in the order they were configured, for multi-limit limiters
    /// (`window` with several windows, `sliding_window` with several limits); `None` otherwise.
    pub limits: Option<Box<[LimitStatus]>>,
    /// What [`crate::Limiter::settle`] needs to charge or refund the difference between this
    /// call's cost and its actual cost, exactly once: set on admitted calls of counting kinds,
    /// `None` on refusals, peeks and kinds that cannot be settled.
    pub settle: Option<SettleTicket>,
    /// Shadow mode only: the limiter would have refused this call and admitted it instead
    /// (`allowed` is true, nothing was consumed, no lease was granted). `remaining` and
    /// `retry_after` say what enforcement would have said: `retry_after` is the time until the
    /// same call would be admitted, the one allowed decision where it is not zero.
    pub shadow_refused: bool,
}

/// The part of an admitted decision that a settle reads: whose state was charged, how much,
/// when, and the id that makes a settle apply once however often it is sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SettleTicket {
    /// The key the call was charged to (held in the ticket itself when short: see
    /// [`SettleKey`](crate::SettleKey)).
    pub key: crate::SettleKey,
    /// The cost the call was charged with.
    pub cost: u64,
    /// The instant the charge was made at (µs since the epoch, by the deciding clock): it names
    /// the window, sub-bucket, period or log entries a refund may give back to.
    pub charged_at_micros: u64,
    /// Made at check time, unique per process and call: the backend records it when the settle
    /// applies, so a repeat of the same settle is a no-op.
    pub id: u64,
    /// Identifies the limiter (its kind, name and backend) the call was made on: a ticket is
    /// only settled by that limiter.
    pub limiter: u64,
}

impl SettleTicket {
    /// Rebuilds a ticket from its parts (bindings carry tickets across the language boundary).
    /// A ticket rebuilt from data that left the process is settled with
    /// [`Limiter::settle_sealed`](crate::Limiter::settle_sealed) and the seal
    /// [`Limiter::seal`](crate::Limiter::seal) gave for it, which refuses one changed on the way.
    pub fn from_parts(key: &str, cost: u64, charged_at_micros: u64, id: u64, limiter: u64) -> Self {
        SettleTicket { key: key.into(), cost, charged_at_micros, id, limiter }
    }
}

/// The state of one limit of a multi-limit limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitStatus {
    /// The span this limit covers.
    pub window: Duration,
    /// The limit's size.
    pub limit: u64,
    /// What is left of it.
    pub remaining: u64,
    /// Zero if this limit admits the call; otherwise when it would.
    pub retry_after: Duration,
    /// Time until this limit is back to full.
    pub reset_after: Duration,
}

/// A slot held in a concurrent limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Lease {
    /// Unique id of this grant.
    pub id: u128,
    /// Strictly increases with every grant of the same limiter and key: a resource guarded by the
    /// limiter can refuse writes carrying a token lower than one it has already seen. Zero for a
    /// lease granted while failing open (Redis unreachable), which guards nothing.
    pub fencing_token: u64,
    /// When it was granted, by the deciding clock (µs since the epoch): the hold time reported
    /// at release is measured from it.
    pub granted_at_micros: u64,
}

impl Lease {
    /// Rebuilds a lease from its parts (bindings carry leases across the language boundary).
    pub fn from_parts(id: u128, fencing_token: u64, granted_at_micros: u64) -> Self {
        Lease { id, fencing_token, granted_at_micros }
    }
}

impl Decision {
    /// Whether the call consumed its cost: admitted, and not only reported as a refusal in
    /// shadow mode (see [`Decision::shadow_refused`]).
    #[inline]
    pub(crate) fn consumed(&self) -> bool {
        self.allowed && !self.shadow_refused
    }

    /// A decision from its plain parts: for a binding that holds decisions as plain values (a
    /// JavaScript object) and applies the core's rules to them, such as [`Self::http_headers`].
    #[inline(always)]
    pub fn from_parts(allowed: bool, limit: u64, remaining: u64, retry_after: Duration, reset_after: Duration) -> Self {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after,
            lease: None,
            decided_at_micros: 0,
            limits: None,
            settle: None,
            shadow_refused: false,
        }
    }

    /// The standard rate-limit response headers: `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset` (seconds until full) and, when refused, `Retry-After` (seconds until the
    /// call could succeed). Times are whole seconds rounded up, so a client that honours them
    /// never retries too early. Every binding formats headers from this one rule.
    pub fn http_headers(&self) -> Vec<(&'static str, u64)> {
        let mut headers = vec![
            ("RateLimit-Limit", self.limit),
            ("RateLimit-Remaining", self.remaining),
            ("RateLimit-Reset", http_seconds(self.reset_after)),
        ];
        if !self.allowed {
            headers.push(("Retry-After", http_seconds(self.retry_after)));
        }
        headers
    }

    /// The rate-limit header fields of this decision in `form` (the IETF RateLimit header
    /// fields draft; draft-11 is the default of every binding, as of the HTTP middleware), for
    /// the policy named `policy` (draft-11's item name; the middleware uses the limiter's name),
    /// and `Retry-After` when refused. Times are whole seconds rounded up.
    pub fn rate_limit_headers(&self, form: HeaderForm, policy: &str) -> Vec<(&'static str, String)> {
        let reset = http_seconds(self.reset_after);
        let mut headers = match form {
            HeaderForm::Draft11 => {
                let name = sf_string(policy);
                vec![
                    ("RateLimit-Policy", format!("{name};q={}", self.limit)),
                    ("RateLimit", format!("{name};r={};t={reset}", self.remaining)),
                ]
            }
            HeaderForm::Draft7 => vec![
                ("RateLimit-Policy", self.limit.to_string()),
                ("RateLimit", format!("limit={}, remaining={}, reset={reset}", self.limit, self.remaining)),
            ],
            HeaderForm::Draft6 => self
                .http_headers()
                .into_iter()
                .filter(|(n, _)| *n != "Retry-After")
                .map(|(n, v)| (n, v.to_string()))
                .collect(),
            HeaderForm::Legacy => vec![
                ("X-RateLimit-Limit", self.limit.to_string()),
                ("X-RateLimit-Remaining", self.remaining.to_string()),
                ("X-RateLimit-Reset", reset.to_string()),
            ],
        };
        if !self.allowed {
            headers.push(("Retry-After", http_seconds(self.retry_after).to_string()));
        }
        headers
    }

    /// A decision that always allows: used by the unlimited limiter. Its limit and remaining are
    /// 2^53, the largest integer every binding's numbers hold exactly (and the largest cost).
    pub(crate) fn unlimited() -> Self {
        Decision {
            allowed: true,
            limit: crate::params::MAX_COUNT,
            remaining: crate::params::MAX_COUNT,
            retry_after: Duration::ZERO,
            reset_after: Duration::ZERO,
            lease: None,
            decided_at_micros: 0,
            limits: None,
            settle: None,
            shadow_refused: false,
        }
    }
}
