//! `Backend.check_all` / `acquire_all` (several limits, all or nothing) and their asyncio
//! forms, and `CombinedDecision`, what they return. The parts are converted here; the core
//! decides (see `ratekeeper::Backend::check_all`).

use pyo3::inspect::PyStaticExpr;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::{type_hint_identifier, type_hint_subscript, type_hint_union, Borrowed};

use crate::aio::{self, Payload};
use crate::decision::Decision;
use crate::errors::{guard, guard_detached, to_py_err};
use crate::limiter::{Fut, Hint, Limiter};

/// `[(limiter, key, cost), ...]`: each part a `ratekeeper.Limiter`, a key (`str` or `None`)
/// and a cost (`int`, default 1 when the tuple has two items).
pub(crate) struct Parts {
    parts: Vec<(ratekeeper::Limiter, Option<String>, u64)>,
    /// Some part goes to Redis: the sync call releases the GIL.
    remote: bool,
}

impl Parts {
    /// The span's subject of a call over these parts, if their backend is traced.
    fn subject(&self, backend: &ratekeeper::Backend) -> Option<crate::trace::Subject> {
        let traced = self.parts.first().is_some_and(|(limiter, _, _)| limiter.traced());
        traced.then(|| crate::trace::Subject::of_all(backend.id(), self.parts.iter().map(|(limiter, _, _)| limiter)))
    }
}

fn bad(py: Python<'_>, path: String, message: impl Into<String>) -> PyErr {
    to_py_err(py, ratekeeper::Error::invalid_field(path, message))
}

impl<'a, 'py> FromPyObject<'a, 'py> for Parts {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_subscript!(
        type_hint_identifier!("collections.abc", "Sequence"),
        type_hint_union!(
            type_hint_subscript!(
                type_hint_identifier!("builtins", "tuple"),
                type_hint_identifier!("ratekeeper._limiter", "Limiter"),
                type_hint_union!(
                    type_hint_identifier!("builtins", "str"),
                    PyStaticExpr::Constant { value: pyo3::inspect::PyStaticConstant::None }
                ),
                type_hint_identifier!("builtins", "int")
            ),
            type_hint_subscript!(
                type_hint_identifier!("builtins", "tuple"),
                type_hint_identifier!("ratekeeper._limiter", "Limiter"),
                type_hint_union!(
                    type_hint_identifier!("builtins", "str"),
                    PyStaticExpr::Constant { value: pyo3::inspect::PyStaticConstant::None }
                )
            )
        )
    );

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
            return Err(bad(py, "parts".into(), "must be a sequence of (limiter, key, cost) tuples, not a string"));
        }
        let iter =
            obj.try_iter().map_err(|_| bad(py, "parts".into(), "must be a sequence of (limiter, key, cost) tuples"))?;
        let mut parts = Vec::new();
        let mut remote = false;
        for (i, item) in iter.enumerate() {
            let item = item?;
            let fields: Vec<Bound<'py, PyAny>> = match item.try_iter() {
                Ok(fields) if !item.is_instance_of::<PyString>() => fields.collect::<PyResult<_>>()?,
                _ => return Err(bad(py, format!("parts[{i}]"), "must be a (limiter, key, cost) tuple")),
            };
            if !(2..=3).contains(&fields.len()) {
                return Err(bad(py, format!("parts[{i}]"), "must be a (limiter, key, cost) tuple"));
            }
            let limiter = fields[0]
                .cast::<Limiter>()
                .map_err(|_| bad(py, format!("parts[{i}]"), "must start with a ratekeeper.Limiter"))?;
            let key = if fields[1].is_none() {
                None
            } else {
                let key = fields[1]
                    .cast::<PyString>()
                    .map_err(|_| bad(py, format!("parts[{i}].key"), "must be a str or None"))?;
                Some(key.to_str()?.to_owned())
            };
            let cost = match fields.get(2) {
                None => 1,
                Some(cost) if cost.is_instance_of::<pyo3::types::PyBool>() => {
                    return Err(bad(py, format!("parts[{i}].cost"), "must be a whole number, got a bool"))
                }
                Some(cost) => match cost.extract::<i128>() {
                    Ok(c) if (0..=(1i128 << 53)).contains(&c) => c as u64,
                    Ok(c) => return Err(bad(py, format!("parts[{i}].cost"), format!("must be 1 to 2^53, got {c}"))),
                    Err(_) => return Err(bad(py, format!("parts[{i}].cost"), "must be a whole number (int)")),
                },
            };
            let limiter = limiter.get();
            remote |= limiter.remote;
            parts.push((limiter.inner.clone(), key, cost));
        }
        Ok(Parts { parts, remote })
    }
}

impl Parts {
    fn borrowed(&self) -> Vec<(&ratekeeper::Limiter, Option<&str>, u64)> {
        self.parts.iter().map(|(l, k, c)| (l, k.as_deref(), *c)).collect()
    }
}

/// What `Backend.check_all` decided: every part admitted (and consumed), or none consumed
/// anything. Truthy when allowed.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct CombinedDecision {
    pub(crate) inner: ratekeeper::CombinedDecision,
}

impl Hint for CombinedDecision {
    const HINT: PyStaticExpr = <CombinedDecision as pyo3::PyTypeInfo>::TYPE_HINT;
}

#[pymethods]
impl CombinedDecision {
    /// Whether every part was admitted; when false, no part consumed anything.
    #[getter]
    fn allowed(&self) -> bool {
        self.inner.allowed
    }

    /// Seconds until the combination may be admitted: 0 when allowed, else the longest
    /// `retry_after` of the parts that refused.
    #[getter]
    fn retry_after(&self) -> f64 {
        self.inner.retry_after.as_secs_f64()
    }

    /// Each part's decision, in the order of the parts. In a refused combination a part may say
    /// `allowed` (alone it would have passed) but consumed nothing and holds no lease.
    #[getter]
    fn parts(&self) -> Vec<Decision> {
        self.inner.parts.iter().map(|p| Decision::new(p.decision.clone(), Some(&p.key))).collect()
    }

    /// Releases the lease of every admitted concurrent part.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        guard_detached(py, || self.inner.release_blocking())
    }

    /// asyncio form of `release`.
    fn arelease<'py>(&self, py: Python<'py>) -> PyResult<Fut<'py, ()>> {
        let combined = self.inner.clone();
        aio::run(py, true, false, async move {
            combined.release().await?;
            Ok(Payload::None)
        })
        .map(Fut::new)
    }

    fn __bool__(&self) -> bool {
        self.inner.allowed
    }

    fn __repr__(&self) -> String {
        format!(
            "CombinedDecision(allowed={}, retry_after={}, parts={})",
            if self.inner.allowed { "True" } else { "False" },
            self.inner.retry_after.as_secs_f64(),
            self.inner.parts.len()
        )
    }
}

/// `Backend.check_all`.
pub(crate) fn check_all(py: Python<'_>, backend: &ratekeeper::Backend, parts: Parts) -> PyResult<Py<CombinedDecision>> {
    let check_all = || {
        let inner = if parts.remote {
            guard_detached(py, || backend.check_all_blocking(&parts.borrowed()))?
        } else {
            guard(py, || backend.check_all_blocking(&parts.borrowed()))?
        };
        Py::new(py, CombinedDecision { inner })
    };
    match parts.subject(backend) {
        Some(subject) => crate::trace::traced(py, subject, "check_all", check_all),
        None => check_all(),
    }
}

/// `Backend.acquire_all`.
pub(crate) fn acquire_all(
    py: Python<'_>,
    backend: &ratekeeper::Backend,
    parts: Parts,
    wait_timeout: Option<std::time::Duration>,
) -> PyResult<Py<CombinedDecision>> {
    let acquire_all = || {
        let inner = guard_detached(py, || backend.acquire_all_blocking(&parts.borrowed(), wait_timeout))?;
        Py::new(py, CombinedDecision { inner })
    };
    match parts.subject(backend) {
        Some(subject) => crate::trace::traced(py, subject, "acquire_all", acquire_all),
        None => acquire_all(),
    }
}

/// `Backend.acheck_all` and `Backend.aacquire_all` (`wait`: the latter, with its timeout).
pub(crate) fn acheck_all<'py>(
    py: Python<'py>,
    backend: &ratekeeper::Backend,
    parts: Parts,
    wait: Option<Option<std::time::Duration>>,
) -> PyResult<Fut<'py, CombinedDecision>> {
    let subject = parts.subject(backend);
    let started = subject.as_ref().map(|_| crate::trace::now());
    let collector = crate::trace::collector(started);
    let noted = collector.clone();
    let backend = backend.clone();
    let remote = parts.remote;
    let future = aio::run(py, remote, wait.is_some(), async move {
        let borrowed = parts.borrowed();
        let combined = match wait {
            None => crate::trace::noted(noted, backend.check_all(&borrowed)).await?,
            Some(timeout) => crate::trace::noted(noted, backend.acquire_all(&borrowed, timeout)).await?,
        };
        Ok(Payload::Combined(combined))
    })?;
    if let Some(subject) = subject {
        let method = if wait.is_some() { "acquire_all" } else { "check_all" };
        crate::trace::traced_future(py, || subject, method, &future, started, collector);
    }
    Ok(Fut::new(future))
}
