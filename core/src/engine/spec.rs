//! The parts of a limiter spec shared by several kinds. The spec itself ([`super::LimiterSpec`])
//! is generated from the table of kinds in `kinds.rs`.

use std::time::Duration;

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
