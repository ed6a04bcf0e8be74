//! Stripe's load shedders: refusals raise `Shed` (HTTP 503), never `OverLimit` (429).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use crate::aio::{self, Payload};
use crate::args::{
    invalid, Count, Float, PBeforeShedding, PEndOfGood, PLevels, PLimit, PLockTimeout, PName, PPriority, PStartOfBad,
    PToShedAll, PUtilization, Seconds, Text, UInt,
};
use crate::backend::Backend;
use crate::clock::ClockArg;
use crate::decision::Lease;
use crate::errors::{guard, guard_detached};
use crate::limiter::Fut;

/// Fleet usage load shedder: at most `limit` non-critical requests in flight across every
/// process sharing `backend`; critical requests bypass it. A request still in flight after
/// `lock_timeout` seconds (a crashed worker) gives its slot back.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct FleetShedder {
    inner: ratekeeper::FleetShedder,
    remote: bool,
}

#[pymethods]
impl FleetShedder {
    #[new]
    #[pyo3(signature = (backend, name, limit, lock_timeout = Seconds::new(Duration::from_secs(60))))]
    fn new(
        py: Python<'_>,
        backend: PyRef<'_, Backend>,
        name: Text<'_, PName>,
        limit: Count<PLimit>,
        lock_timeout: Seconds<PLockTimeout>,
    ) -> PyResult<Self> {
        let inner = guard(py, || ratekeeper::FleetShedder::new(&backend.inner, name.0, limit.0, lock_timeout.0))?;
        Ok(FleetShedder { inner, remote: backend.kind != "memory" })
    }

    /// Admits a request: critical requests always pass and hold nothing (None); others take a
    /// slot (a `Lease`, to give back with `leave`) or raise `Shed`.
    #[pyo3(signature = (critical = false))]
    fn enter(&self, py: Python<'_>, critical: bool) -> PyResult<Option<Lease>> {
        let ticket = if self.remote {
            guard_detached(py, || self.inner.enter_blocking(critical))?
        } else {
            guard(py, || self.inner.enter_blocking(critical))?
        };
        Ok(ticket.map(|inner| Lease { inner, key: None }))
    }

    /// Gives back the slot `enter` returned (None: nothing to give back).
    fn leave(&self, py: Python<'_>, ticket: Option<PyRef<'_, Lease>>) -> PyResult<()> {
        let ticket = ticket.map(|l| l.inner);
        if self.remote {
            guard_detached(py, || self.inner.leave_blocking(ticket))
        } else {
            guard(py, || self.inner.leave_blocking(ticket))
        }
    }

    /// asyncio form of `enter`.
    #[pyo3(signature = (critical = false))]
    fn aenter<'py>(&self, py: Python<'py>, critical: bool) -> PyResult<Fut<'py, Option<Lease>>> {
        let inner = self.inner.clone();
        aio::run(py, self.remote, false, async move { Ok(Payload::Ticket(inner.enter(critical).await?, inner)) })
            .map(Fut::new)
    }

    /// asyncio form of `leave`.
    fn aleave<'py>(&self, py: Python<'py>, ticket: Option<PyRef<'py, Lease>>) -> PyResult<Fut<'py, ()>> {
        let inner = self.inner.clone();
        let ticket = ticket.map(|l| l.inner);
        aio::run(py, self.remote, false, async move {
            inner.leave(ticket).await?;
            Ok(Payload::None)
        })
        .map(Fut::new)
    }
}

/// Thresholds of a `UtilizationShedder`; the defaults are Stripe's.
#[pyclass(frozen, get_all, module = "ratekeeper._ratekeeper")]
#[derive(Clone)]
pub struct UtilizationConfig {
    /// Below this utilization, shedding decreases (default 0.7).
    end_of_good: f64,
    /// Above this utilization, shedding increases (default 0.8); in between nothing changes.
    start_of_bad: f64,
    /// Seconds of full pressure before anything is shed (default 28).
    seconds_before_shedding: f64,
    /// Seconds of full pressure from the first drop until all non-critical traffic is shed
    /// (default 120).
    seconds_to_shed_all: f64,
    /// Levels of non-critical priority (default 3): priority 0 is critical and never shed,
    /// `levels` is the least important and goes first.
    levels: u8,
}

#[pymethods]
impl UtilizationConfig {
    #[new]
    #[pyo3(signature = (*, end_of_good = None, start_of_bad = None, seconds_before_shedding = None,
        seconds_to_shed_all = None, levels = None))]
    fn new(
        py: Python<'_>,
        end_of_good: Option<Float<PEndOfGood>>,
        start_of_bad: Option<Float<PStartOfBad>>,
        seconds_before_shedding: Option<Float<PBeforeShedding>>,
        seconds_to_shed_all: Option<Float<PToShedAll>>,
        levels: Option<UInt<PLevels>>,
    ) -> PyResult<Self> {
        let d = ratekeeper::UtilizationConfig::default();
        let levels = match levels {
            Some(l) => {
                u8::try_from(l.0).map_err(|_| invalid(py, "levels", format!("must be at most 255, got {}", l.0)))?
            }
            None => d.levels,
        };
        let config = UtilizationConfig {
            end_of_good: end_of_good.map_or(d.end_of_good, |v| v.0),
            start_of_bad: start_of_bad.map_or(d.start_of_bad, |v| v.0),
            seconds_before_shedding: seconds_before_shedding.map_or(d.seconds_before_shedding, |v| v.0),
            seconds_to_shed_all: seconds_to_shed_all.map_or(d.seconds_to_shed_all, |v| v.0),
            levels,
        };
        // Validated by the core (a throwaway shedder), so a bad config fails here, naming the field.
        guard(py, || {
            ratekeeper::UtilizationShedder::new(config.core(), Arc::new(ratekeeper::SystemClock)).map(|_| ())
        })?;
        Ok(config)
    }

    fn __repr__(&self) -> String {
        format!(
            "UtilizationConfig(end_of_good={}, start_of_bad={}, seconds_before_shedding={}, seconds_to_shed_all={}, levels={})",
            self.end_of_good, self.start_of_bad, self.seconds_before_shedding, self.seconds_to_shed_all, self.levels
        )
    }
}

impl UtilizationConfig {
    fn core(&self) -> ratekeeper::UtilizationConfig {
        let mut c = ratekeeper::UtilizationConfig::default();
        c.end_of_good = self.end_of_good;
        c.start_of_bad = self.start_of_bad;
        c.seconds_before_shedding = self.seconds_before_shedding;
        c.seconds_to_shed_all = self.seconds_to_shed_all;
        c.levels = self.levels;
        c
    }
}

/// Worker utilization load shedder, in-process: feed it a utilization signal with `observe`
/// (0 = idle, 1 = every worker busy) and `check(priority)` each request. The share dropped
/// moves slowly: nothing changes between `end_of_good` and `start_of_bad`; under full pressure
/// shedding starts after ~28 s, least important traffic first, and reaches all non-critical
/// traffic ~120 s later; it recovers as slowly.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct UtilizationShedder {
    inner: ratekeeper::UtilizationShedder,
}

fn priority(py: Python<'_>, p: UInt<PPriority>) -> PyResult<u8> {
    u8::try_from(p.0).map_err(|_| invalid(py, "priority", format!("must be at most 255, got {}", p.0)))
}

#[pymethods]
impl UtilizationShedder {
    #[new]
    #[pyo3(signature = (config = None, *, clock = None))]
    fn new(py: Python<'_>, config: Option<PyRef<'_, UtilizationConfig>>, clock: Option<ClockArg>) -> PyResult<Self> {
        let config = config.map_or_else(ratekeeper::UtilizationConfig::default, |c| c.core());
        let clock: Arc<dyn ratekeeper::Clock> = match clock {
            Some(c) => c.0,
            None => Arc::new(ratekeeper::SystemClock),
        };
        Ok(UtilizationShedder { inner: guard(py, || ratekeeper::UtilizationShedder::new(config, clock))? })
    }

    /// Records the current utilization (0..1) and advances the shedding amount to now.
    fn observe(&self, py: Python<'_>, utilization: Float<PUtilization>) -> PyResult<()> {
        guard(py, || self.inner.observe(utilization.0))
    }

    /// The share of non-critical traffic being shed now, 0..1.
    fn shedding(&self) -> f64 {
        self.inner.shedding()
    }

    /// The chance that a request of `priority` is dropped now (0 for priority 0, critical).
    fn drop_chance(&self, py: Python<'_>, priority: UInt<PPriority>) -> PyResult<f64> {
        let p = self::priority(py, priority)?;
        guard(py, || self.inner.drop_chance(p))
    }

    /// Admits a request of `priority` (0 = critical, never shed … `levels` = least important)
    /// or raises `Shed`.
    fn check(&self, py: Python<'_>, priority: UInt<PPriority>) -> PyResult<()> {
        let p = self::priority(py, priority)?;
        guard(py, || self.inner.check(p))
    }
}
