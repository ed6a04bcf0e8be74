//! # ratekeeper
//!
//! Distributed rate limiting with one core for Rust, Python, Node and C. Limiters built on the
//! same backend share state; with no Redis configured, the in-process memory backend is used.
//!
//! ```
//! use std::time::Duration;
//! use ratekeeper::Backend;
//!
//! let backend = Backend::memory();
//! let limiter = backend.token_bucket("api", 10.0, 5).unwrap();
//! let decision = limiter.check_blocking(Some("user-42"), 1).unwrap();
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 4);
//! ```
#![warn(missing_docs)]

mod backend;
mod backoff;
mod clock;
mod decision;
pub mod defaults;
mod engine;
mod error;
mod fork;
pub mod http;
mod limiter;
mod live;
mod metrics;
pub mod observe;
#[cfg(feature = "otel")]
pub mod otel;
mod padded;
pub mod params;
mod prometheus;
mod rate;
mod runtime;
mod settle_key;
mod settle_seal;
mod shedder;
pub mod trace;
pub mod upstream;
mod views;

pub use backend::redis::driven;
pub use backend::{
    lua_sources, redact_url, Backend, BackendStats, FailurePolicy, MemoryConfig, OnConflict, RedisConfig,
    SentinelConfig, TlsConfig,
};
pub use backoff::Backoff;
pub use clock::{Clock, ManualClock, Sleep, SystemClock, MAX_INSTANT_MICROS};
pub use decision::{Decision, Lease, LimitStatus, SettleTicket};
#[allow(deprecated)]
pub use defaults::*;
pub use engine::gcra::MAX_AHEAD_CAPACITIES;
pub use engine::partitions::{MAX_PARTITIONS, MIN_LEASE_TTL};
pub use engine::{CalendarPeriod, Colocate, Kind, LimiterConfig, LimiterSpec, SlidingLimit, WindowLimit};
pub use error::{Error, ErrorKind, Result};
pub use http::{http_seconds, HeaderForm};
pub use limiter::{CombinedDecision, Limiter, PartDecision, PartitionsHeld, Permit, Policy, MAX_CHECK_ALL_PARTS};
pub use live::{set_client_language, LimiterInfo};
pub use metrics::{Metrics, LATENCY_BOUNDS};
pub use rate::{parse_duration, parse_rate, parse_rates, Rate};
pub use runtime::{block_on, runtime, CatchPanic};
pub use settle_key::SettleKey;
pub use shedder::{FleetShedder, FleetTicket, UtilizationConfig, UtilizationShedder};
pub use views::{
    ConcurrentUse, Holder, KeyUse, MinuteCounts, HISTORY_MINUTES, MAX_HOLDERS_SHOWN, MAX_KEYS_EXAMINED,
    MAX_SCANNED_PER_MASTER,
};
