//! The argument of `settle` / `asettle`: a decision this package returned (its settle ticket
//! travels inside it). Anything else is `InvalidArgument` naming `decision`.

use pyo3::inspect::PyStaticExpr;
use pyo3::prelude::*;
use pyo3::Borrowed;

use crate::args::invalid;
use crate::decision::Decision;

/// A decision to settle.
pub(crate) struct SettleDecision(pub ratekeeper::Decision);

impl<'a, 'py> FromPyObject<'a, 'py> for SettleDecision {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = <Decision as pyo3::type_object::PyTypeInfo>::TYPE_HINT;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.cast::<Decision>() {
            Ok(d) => Ok(SettleDecision(d.get().inner.clone())),
            Err(_) => {
                let type_name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
                Err(invalid(
                    obj.py(),
                    "decision",
                    format!("must be a Decision returned by check or acquire, got {type_name}"),
                ))
            }
        }
    }
}
