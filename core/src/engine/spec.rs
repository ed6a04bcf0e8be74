//! The public description of a limiter and its compilation, with validation, into an engine.

use std::time::Duration;

use super::calendar::Calendar;
use super::calendar_period::CalendarPeriod;
use super::concurrent::Concurrent;
use super::gcra::Gcra;
use super::leased::Leased;
use super::log::Log;
use super::sliding::Sliding;
use super::Algorithm;
use crate::engine::partitions::Partitions;
use crate::error::Result;

/// One window of a `window` limiter: at most `limit` admissions in any span of `interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowLimit {
    /// Admissions allowed per span.
    pub limit: u64,
    /// The span.
    pub interval: Duration,
}

/// One limit of a `sliding_window` limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLimit {
    /// The span the limit covers.
    pub duration: Duration,
    /// Units allowed per span.
    pub limit: u64,
    /// Sub-bucket size; `None` (or a value ≥ `duration`) makes a fixed window aligned to the epoch.
    pub precision: Option<Duration>,
}

/// What a limiter does, with its parameters. Build limiters with the constructors on
/// [`crate::Backend`]; this enum is for callers that build limiters from configuration.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LimiterSpec {
    /// At most `limit` holders at once; leases older than `lock_timeout` may be reclaimed.
    Concurrent {
        /// Slots.
        limit: u64,
        /// How long a lease may be held before another caller may reclaim it.
        lock_timeout: Duration,
    },
    /// Fixed windows aligned to multiples of `interval` since the epoch.
    Bucket {
        /// Units per window.
        limit: u64,
        /// Window length.
        interval: Duration,
    },
    /// Exact sliding window(s): never more than `limit` in any span of `interval`, for each.
    Window {
        /// One or more windows, checked and recorded together.
        windows: Vec<WindowLimit>,
    },
    /// Several limits over sub-buckets, checked atomically; only admitted calls count.
    SlidingWindow {
        /// One or more limits.
        limits: Vec<SlidingLimit>,
    },
    /// Refills `rate` tokens per second up to `capacity`.
    TokenBucket {
        /// Tokens per second (at most 1,000,000).
        rate: f64,
        /// Burst size.
        capacity: u64,
    },
    /// A token bucket (`rate` per second up to `capacity`) whose tokens each process takes from
    /// the backend in leases of up to `chunk` and spends in-process; a lease's unspent tokens go
    /// back when the limiter is closed, or lapse after `lease_ttl`. The fleet never admits more
    /// than the bucket allows; leasing ahead may under-use it. On the memory backend it is the
    /// in-process token bucket.
    Leased {
        /// Tokens per second (at most 1,000,000).
        rate: f64,
        /// Burst size.
        capacity: u64,
        /// The most tokens one lease takes (`None`: capacity / 16, at least 1).
        chunk: Option<u64>,
        /// How long a process may spend a lease's tokens before they lapse.
        lease_ttl: Duration,
    },
    /// A burst of `size`, then one call per `drain / size`; full again after `drain` idle.
    Leaky {
        /// Burst size.
        size: u64,
        /// Time for a full bucket to drain.
        drain: Duration,
    },
    /// A leaky bucket of points refilled in `refill`; calls give an estimate, corrected later.
    Points {
        /// Points in a full bucket.
        capacity: u64,
        /// Time for an empty bucket to refill completely.
        refill: Duration,
    },
    /// At most `limit` per calendar period in time zone `tz` (see [`CalendarPeriod`]).
    Calendar {
        /// Units per period.
        limit: u64,
        /// Day, ISO week (from Monday), month or year.
        period: CalendarPeriod,
        /// An IANA time zone name, e.g. `"Europe/Berlin"` or `"UTC"`.
        tz: String,
        /// Monthly periods only: the day of the month they start on (1-31, clamped to the
        /// month's last day; default 1).
        anchor: Option<u8>,
    },
    /// Leased partitions (Azure's rate limiting pattern): `total_rate` per second split into
    /// `partitions` equal partitions that processes lease for `lease_ttl` and pace themselves to.
    Partitions {
        /// Units per second of the whole service (at most 1,000,000).
        total_rate: f64,
        /// Equal partitions the rate is split into (1 to [`crate::MAX_PARTITIONS`]).
        partitions: u64,
        /// How long a lease lasts unless renewed: a dead process's partitions return after it.
        lease_ttl: Duration,
        /// Partitions set aside for the priority class (0: none).
        reserved: u64,
        /// Whether this limiter belongs to the priority class: it leases only the reserved
        /// partitions, and the others only the rest.
        priority: bool,
    },
    /// Always allows; touches no backend.
    Unlimited,
}

/// The kind of a limiter: part of its storage key, so limiters of different kinds that share a
/// name never read each other's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// [`LimiterSpec::Concurrent`].
    Concurrent,
    /// [`LimiterSpec::Bucket`].
    Bucket,
    /// [`LimiterSpec::Window`].
    Window,
    /// [`LimiterSpec::SlidingWindow`].
    SlidingWindow,
    /// [`LimiterSpec::TokenBucket`].
    TokenBucket,
    /// [`LimiterSpec::Leased`].
    Leased,
    /// [`LimiterSpec::Leaky`].
    Leaky,
    /// [`LimiterSpec::Points`].
    Points,
    /// [`LimiterSpec::Calendar`].
    Calendar,
    /// [`LimiterSpec::Partitions`].
    Partitions,
    /// [`LimiterSpec::Unlimited`].
    Unlimited,
}

impl Kind {
    /// The snake_case name used in storage keys, vectors and bindings.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Concurrent => "concurrent",
            Kind::Bucket => "bucket",
            Kind::Window => "window",
            Kind::SlidingWindow => "sliding_window",
            Kind::TokenBucket => "token_bucket",
            Kind::Leased => "leased",
            Kind::Leaky => "leaky",
            Kind::Points => "points",
            Kind::Calendar => "calendar",
            Kind::Partitions => "partitions",
            Kind::Unlimited => "unlimited",
        }
    }

    /// The kind named by [`Kind::as_str`].
    pub fn from_name(name: &str) -> Option<Kind> {
        [
            Kind::Concurrent,
            Kind::Bucket,
            Kind::Window,
            Kind::SlidingWindow,
            Kind::TokenBucket,
            Kind::Leased,
            Kind::Leaky,
            Kind::Points,
            Kind::Calendar,
            Kind::Partitions,
            Kind::Unlimited,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

impl LimiterSpec {
    /// The kind of limiter this spec builds.
    pub fn kind(&self) -> Kind {
        match self {
            LimiterSpec::Concurrent { .. } => Kind::Concurrent,
            LimiterSpec::Bucket { .. } => Kind::Bucket,
            LimiterSpec::Window { .. } => Kind::Window,
            LimiterSpec::SlidingWindow { .. } => Kind::SlidingWindow,
            LimiterSpec::TokenBucket { .. } => Kind::TokenBucket,
            LimiterSpec::Leased { .. } => Kind::Leased,
            LimiterSpec::Leaky { .. } => Kind::Leaky,
            LimiterSpec::Points { .. } => Kind::Points,
            LimiterSpec::Calendar { .. } => Kind::Calendar,
            LimiterSpec::Partitions { .. } => Kind::Partitions,
            LimiterSpec::Unlimited => Kind::Unlimited,
        }
    }

    /// The same limiter with `1/divisor` of its limits, capacities and rates (each at least 1):
    /// what one of `divisor` processes may use on its own while the shared backend is down.
    pub fn scaled(&self, divisor: u32) -> LimiterSpec {
        let d = u64::from(divisor.max(1));
        let part = |n: u64| (n / d).max(1);
        match self {
            LimiterSpec::Concurrent { limit, lock_timeout } => {
                LimiterSpec::Concurrent { limit: part(*limit), lock_timeout: *lock_timeout }
            }
            LimiterSpec::Bucket { limit, interval } => LimiterSpec::Bucket { limit: part(*limit), interval: *interval },
            LimiterSpec::Window { windows } => LimiterSpec::Window {
                windows: windows.iter().map(|w| WindowLimit { limit: part(w.limit), interval: w.interval }).collect(),
            },
            LimiterSpec::SlidingWindow { limits } => LimiterSpec::SlidingWindow {
                limits: limits.iter().map(|l| SlidingLimit { limit: part(l.limit), ..*l }).collect(),
            },
            LimiterSpec::TokenBucket { rate, capacity } => {
                LimiterSpec::TokenBucket { rate: rate / d as f64, capacity: part(*capacity) }
            }
            LimiterSpec::Leased { rate, capacity, chunk, lease_ttl } => LimiterSpec::Leased {
                rate: rate / d as f64,
                capacity: part(*capacity),
                chunk: chunk.map(|c| c.min(part(*capacity))),
                lease_ttl: *lease_ttl,
            },
            // Leaky and points keep their drain time: a smaller bucket drains at a slower rate.
            LimiterSpec::Leaky { size, drain } => LimiterSpec::Leaky { size: part(*size), drain: *drain },
            LimiterSpec::Points { capacity, refill } => {
                LimiterSpec::Points { capacity: part(*capacity), refill: *refill }
            }
            LimiterSpec::Calendar { limit, period, tz, anchor } => {
                LimiterSpec::Calendar { limit: part(*limit), period: *period, tz: tz.clone(), anchor: *anchor }
            }
            // Partitions never fall back: a process holds what it leased until its deadline.
            LimiterSpec::Partitions { .. } => self.clone(),
            LimiterSpec::Unlimited => LimiterSpec::Unlimited,
        }
    }

    /// Validates every parameter (naming the bad one) and compiles to the engine's integer
    /// microseconds (each engine compiles its own parameters).
    pub(crate) fn compile(&self) -> Result<Algorithm> {
        Ok(match self {
            LimiterSpec::Concurrent { limit, lock_timeout } => {
                Algorithm::Concurrent(Concurrent::compile(*limit, *lock_timeout)?)
            }
            LimiterSpec::Bucket { limit, interval } => Algorithm::Sliding(Sliding::bucket(*limit, *interval)?),
            LimiterSpec::Window { windows } => Algorithm::Log(Log::compile(windows)?),
            LimiterSpec::SlidingWindow { limits } => Algorithm::Sliding(Sliding::compile(limits)?),
            LimiterSpec::TokenBucket { rate, capacity } => Algorithm::Gcra(Gcra::token_bucket(*rate, *capacity)?),
            LimiterSpec::Leased { rate, capacity, chunk, lease_ttl } => {
                Algorithm::Leased(Leased::compile(*rate, *capacity, *chunk, *lease_ttl)?)
            }
            LimiterSpec::Leaky { size, drain } => Algorithm::Gcra(Gcra::leaky(*size, *drain)?),
            LimiterSpec::Points { capacity, refill } => Algorithm::Gcra(Gcra::points(*capacity, *refill)?),
            LimiterSpec::Calendar { limit, period, tz, anchor } => {
                Algorithm::Calendar(Calendar::compile(*limit, *period, tz, *anchor)?)
            }
            LimiterSpec::Partitions { total_rate, partitions, lease_ttl, reserved, priority } => {
                Algorithm::Partitions(Partitions::compile(*total_rate, *partitions, *lease_ttl, *reserved, *priority)?)
            }
            LimiterSpec::Unlimited => Algorithm::Unlimited(super::unlimited::Unlimited),
        })
    }
}
