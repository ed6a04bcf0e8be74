//! The one place where core errors (and panics) become Python exceptions.
//!
//! The exception classes live in the pure-Python module `ratekeeper.errors` (so `InvalidArgument`
//! can be both a `RatekeeperError` and a `ValueError`, and every class pickles with its
//! attributes); they are imported once, on the first error.

use std::any::Any;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use ratekeeper::Error;

struct Classes {
    base: Py<PyType>,
    over_limit: Py<PyType>,
    shed: Py<PyType>,
    lease_lost: Py<PyType>,
    invalid_argument: Py<PyType>,
    backend_unavailable: Py<PyType>,
    timeout: Py<PyType>,
    backend_rejected: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let module = py.import("ratekeeper.errors")?;
        let class = |name: &str| -> PyResult<Py<PyType>> { Ok(module.getattr(name)?.cast_into::<PyType>()?.unbind()) };
        Ok(Classes {
            base: class("RatekeeperError")?,
            over_limit: class("OverLimit")?,
            shed: class("Shed")?,
            lease_lost: class("LeaseLost")?,
            invalid_argument: class("InvalidArgument")?,
            backend_unavailable: class("BackendUnavailable")?,
            timeout: class("Timeout")?,
            backend_rejected: class("BackendRejected")?,
        })
    })
}

/// Converts a core error to the matching `ratekeeper.errors` exception. Every kind the core may
/// add later becomes a plain `RatekeeperError` with the core's message.
pub(crate) fn to_py_err(py: Python<'_>, error: Error) -> PyErr {
    match build(py, &error) {
        Ok(err) => err,
        Err(import_failure) => import_failure,
    }
}

fn build(py: Python<'_>, error: &Error) -> PyResult<PyErr> {
    let c = classes(py)?;
    let message = error.to_string();
    let instance = match error {
        Error::OverLimit { retry_after } => c.over_limit.bind(py).call1((message, retry_after.as_secs_f64()))?,
        Error::InvalidArgument { parameter, .. } => c.invalid_argument.bind(py).call1((message, parameter.as_ref()))?,
        Error::Shed { .. } => c.shed.bind(py).call1((message,))?,
        Error::LeaseLost { .. } => c.lease_lost.bind(py).call1((message,))?,
        Error::BackendUnavailable { .. } => c.backend_unavailable.bind(py).call1((message,))?,
        Error::Timeout { .. } => c.timeout.bind(py).call1((message,))?,
        Error::BackendRejected { code, .. } => c.backend_rejected.bind(py).call1((message, code.as_str()))?,
        _ => c.base.bind(py).call1((message,))?,
    };
    Ok(PyErr::from_value(instance))
}

/// A `RatekeeperError` for a panic caught at the language boundary (a bug in ratekeeper).
pub(crate) fn panic_to_py_err(py: Python<'_>, payload: Box<dyn Any + Send>) -> PyErr {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let message = format!("internal error in ratekeeper (please report it): {detail}");
    match classes(py).and_then(|c| c.base.bind(py).call1((message,))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

/// Converts a core result, mapping the error.
pub(crate) trait IntoPy<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    #[inline]
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py_err(py, e))
    }
}

/// Runs a call into the core, turning a panic into a `RatekeeperError` instead of letting pyo3
/// raise its `PanicException` (a `BaseException` that `except Exception` would not catch).
#[inline]
pub(crate) fn guard<T>(py: Python<'_>, f: impl FnOnce() -> Result<T, Error>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result.py_err(py),
        Err(payload) => Err(panic_to_py_err(py, payload)),
    }
}

/// [`guard`] around a call made with the GIL released (Redis calls, waits).
#[inline]
pub(crate) fn guard_detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T> {
    match py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))) {
        Ok(result) => result.py_err(py),
        Err(payload) => Err(panic_to_py_err(py, payload)),
    }
}
