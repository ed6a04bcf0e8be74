//! `ManualClock`: the core's manual clock, for tests and conformance vectors.

use std::sync::Arc;

use pyo3::inspect::PyStaticExpr;
use pyo3::prelude::*;
use pyo3::Borrowed;
use ratekeeper::params::timeout_from_secs;

use crate::args::invalid;
use crate::args::{Float, PMicros, PSeconds, PStartUs, UInt};
use crate::errors::guard;

/// A clock that only moves when told to; waiters wake when it passes their deadline. Pass it to
/// `Backend.memory(clock=...)` or `Backend.redis(url, clock=...)` (the Redis scripts then take
/// time from it instead of the server's `TIME`), or to `UtilizationShedder`.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct ManualClock {
    pub(crate) inner: ratekeeper::ManualClock,
}

fn micros_u64(py: Python<'_>, v: u128, parameter: &'static str) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| invalid(py, parameter, "must fit in 64 bits".into()))
}

#[pymethods]
impl ManualClock {
    /// A manual clock reading `start_us` microseconds since the epoch (default: now).
    #[new]
    #[pyo3(signature = (start_us = None))]
    fn new(py: Python<'_>, start_us: Option<UInt<PStartUs>>) -> PyResult<Self> {
        let start = match start_us {
            Some(s) => micros_u64(py, s.0, "start_us")?,
            None => {
                use ratekeeper::Clock;
                ratekeeper::SystemClock.now_micros()
            }
        };
        Ok(ManualClock { inner: ratekeeper::ManualClock::new(start) })
    }

    /// Moves the clock forward by `seconds` (truncated to whole microseconds).
    fn advance(&self, py: Python<'_>, seconds: Float<PSeconds>) -> PyResult<()> {
        let d = guard(py, || timeout_from_secs("seconds", seconds.0))?;
        self.inner.advance(d);
        Ok(())
    }

    /// Moves the clock forward by `micros` microseconds.
    fn advance_us(&self, py: Python<'_>, micros: UInt<PMicros>) -> PyResult<()> {
        self.inner.advance_micros(micros_u64(py, micros.0, "micros")?);
        Ok(())
    }

    /// Sets the clock to `micros` microseconds since the epoch (it may move backwards).
    fn set_us(&self, py: Python<'_>, micros: UInt<PMicros>) -> PyResult<()> {
        self.inner.set_micros(micros_u64(py, micros.0, "micros")?);
        Ok(())
    }

    /// The clock's reading in microseconds since the epoch.
    #[getter]
    fn now_us(&self) -> u64 {
        use ratekeeper::Clock;
        self.inner.now_micros()
    }

    /// The clock's reading in seconds since the epoch.
    #[getter]
    fn now(&self) -> f64 {
        use ratekeeper::Clock;
        self.inner.now_micros() as f64 / 1e6
    }

    fn __repr__(&self) -> String {
        use ratekeeper::Clock;
        format!("ManualClock(now_us={})", self.inner.now_micros())
    }
}

/// A `clock=` argument: a `ManualClock`.
pub(crate) struct ClockArg(pub Arc<dyn ratekeeper::Clock>);

impl<'a, 'py> FromPyObject<'a, 'py> for ClockArg {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = <ManualClock as pyo3::PyTypeInfo>::TYPE_HINT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.cast::<ManualClock>() {
            Ok(c) => Ok(ClockArg(Arc::new(c.get().inner.clone()))),
            Err(_) => Err(invalid(obj.py(), "clock", "must be a ratekeeper.ManualClock".into())),
        }
    }
}
