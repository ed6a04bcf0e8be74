//! Operating a backend from Python: the registry's view of a limiter, and the conversions the
//! `Backend` methods `limiters`, `set_limit`, `clear_limit`, `metrics` and `prometheus` use.

use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::decision::Metrics;
use crate::limiter::SpecDict;

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn spec_dict<'py>(py: Python<'py>, json: &str) -> PyResult<Bound<'py, PyDict>> {
    py.import("json")?.getattr("loads")?.call1((json,))?.cast_into::<PyDict>().map_err(Into::into)
}

/// A limiter as the registry (Redis) or this process (memory) knows it.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct LimiterInfo {
    inner: ratekeeper::LimiterInfo,
}

#[pymethods]
impl LimiterInfo {
    /// The limiter's name.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its kind (`"token_bucket"`, `"window"`, ...).
    #[getter]
    fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The spec it was built with, as data (the last process of its kind to register it wins).
    #[getter]
    fn spec<'py>(&self, py: Python<'py>) -> PyResult<SpecDict<'py>> {
        Ok(SpecDict(spec_dict(py, &self.inner.spec)?))
    }

    /// Live overrides as `(key, spec)` pairs: key `None` for the whole limiter.
    #[getter]
    fn overrides<'py>(&self, py: Python<'py>) -> PyResult<Vec<(Option<String>, SpecDict<'py>)>> {
        self.inner.overrides.iter().map(|(key, spec)| Ok((key.clone(), SpecDict(spec_dict(py, spec)?)))).collect()
    }

    /// Who used it: language, library version and host, each once.
    #[getter]
    fn users(&self) -> Vec<String> {
        self.inner.users.clone()
    }

    /// Processes that used it in the last three minutes.
    #[getter]
    fn processes(&self) -> u64 {
        self.inner.processes
    }

    /// When it was first registered (Unix time, seconds).
    #[getter]
    fn first_seen(&self) -> f64 {
        unix_seconds(self.inner.first_seen)
    }

    /// When a process last registered it (Unix time, seconds; renewed once a minute).
    #[getter]
    fn last_seen(&self) -> f64 {
        unix_seconds(self.inner.last_seen)
    }

    /// What the registry reported in the last three minutes about a use of the name it could
    /// not take (another kind used by a live process: one name, one kind; or a whole-limiter
    /// override of another kind), or `None`.
    #[getter]
    fn conflict(&self) -> Option<String> {
        self.inner.conflict.clone()
    }

    /// Whether no process has used the name yet: an override set ahead of a deploy, waiting for
    /// a first user (`kind` and `spec` are the override's).
    #[getter]
    fn waiting(&self) -> bool {
        self.inner.waiting
    }

    fn __repr__(&self) -> String {
        let i = &self.inner;
        format!("LimiterInfo(name={:?}, kind={:?}, spec={}, overrides={})", i.name, i.kind, i.spec, i.overrides.len())
    }
}

/// The registry's entries as Python objects.
pub(crate) fn limiter_infos(infos: Vec<ratekeeper::LimiterInfo>) -> Vec<LimiterInfo> {
    infos.into_iter().map(|inner| LimiterInfo { inner }).collect()
}

/// `[(name, kind, Metrics)]`.
pub(crate) fn metrics_list(
    metrics: Vec<(String, ratekeeper::Kind, ratekeeper::Metrics)>,
) -> Vec<(String, &'static str, Metrics)> {
    metrics.into_iter().map(|(name, kind, inner)| (name, kind.as_str(), Metrics { inner })).collect()
}
