//! Python bindings of ratekeeper: the native module `ratekeeper._ratekeeper`.
//!
//! No limiter logic lives here: the binding converts arguments (through `ratekeeper::params`),
//! results and errors (`errors.rs`, one mapping function), and bridges the core's futures to
//! asyncio (`aio.rs`). The pure-Python package around it (`python/ratekeeper`) adds the
//! exception classes, `within_limit` as a context manager and decorator, and `ratekeeper.Limiter`.

mod aio;
mod args;
mod backend;
mod backoff;
mod check_all;
mod clock;
mod decision;
mod errors;
mod http;
mod limiter;
mod operate;
mod settle;
mod shedder;
mod trace;

/// Native core of ratekeeper; import `ratekeeper` instead.
#[pyo3::pymodule]
mod _ratekeeper {
    #[pymodule_export]
    use super::backend::{Backend, BackendStats};
    #[pymodule_export]
    use super::backoff::Backoff;
    #[pymodule_export]
    use super::check_all::CombinedDecision;
    #[pymodule_export]
    use super::clock::ManualClock;
    #[pymodule_export]
    use super::decision::{Decision, Lease, LimitStatus, Metrics};
    #[pymodule_export]
    use super::http::HttpRules;
    #[pymodule_export]
    use super::limiter::{unlimited, Limiter};
    #[pymodule_export]
    use super::operate::LimiterInfo;
    #[pymodule_export]
    use super::shedder::{FleetShedder, UtilizationConfig, UtilizationShedder};

    /// The version of the ratekeeper core this module was built from.
    #[pymodule_export]
    const CORE_VERSION: &str = env!("CARGO_PKG_VERSION");
}
