//! The HTTP rules of the core (`ratekeeper::http`) for the Python middleware
//! (`python/ratekeeper/_http.py`): the client key, the rate-limit header fields and the
//! partition key, validated once per middleware.

use std::time::Duration;

use pyo3::prelude::*;
use ratekeeper::http::{duration_of_secs, Report, ReportLimit, Rules};

use crate::decision::Decision;
use crate::errors::to_py_err;

/// One middleware's HTTP options, validated: the header form, the trusted proxies and the
/// header they set, the partition key secret. Raises InvalidArgument naming the bad one (never
/// showing the secret).
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct HttpRules {
    inner: Rules,
}

/// Reads a float attribute of seconds.
fn seconds(object: &Bound<'_, PyAny>, name: &str) -> PyResult<Duration> {
    Ok(duration_of_secs(object.getattr(name)?.extract::<f64>()?))
}

/// A report of one limiter's decision: a `Decision`, or any object with its attributes.
fn report<'a>(name: &'a str, window: Option<f64>, decision: &Bound<'_, PyAny>) -> PyResult<Report<'a>> {
    let window = window.map(duration_of_secs);
    if let Ok(native) = decision.cast::<Decision>() {
        return Ok(Report::of(name, window, &native.get().inner));
    }
    let mut limits = Vec::new();
    let given = decision.getattr("limits")?;
    if !given.is_none() {
        for limit in given.try_iter()? {
            let limit = limit?;
            limits.push(ReportLimit::of_limit(
                seconds(&limit, "window")?,
                limit.getattr("limit")?.extract()?,
                limit.getattr("remaining")?.extract()?,
                seconds(&limit, "reset_after")?,
                seconds(&limit, "retry_after")?,
            ));
        }
    }
    Ok(Report {
        name,
        decision: ReportLimit {
            limit: decision.getattr("limit")?.extract()?,
            remaining: decision.getattr("remaining")?.extract()?,
            reset_after: seconds(decision, "reset_after")?,
            retry_after: seconds(decision, "retry_after")?,
            allowed: decision.getattr("allowed")?.extract()?,
            window,
        },
        limits,
    })
}

#[pymethods]
impl HttpRules {
    /// `headers`: "draft-11", "draft-7", "draft-6", "legacy" or None; `trusted_proxies`: IP
    /// addresses or CIDR ranges; `proxy_header`: "X-Forwarded-For" or "Forwarded";
    /// `partition_key_secret`: at least 16 bytes, draft-11 only.
    #[new]
    #[pyo3(signature = (headers, trusted_proxies, proxy_header, partition_key_secret=None))]
    fn new(
        py: Python<'_>,
        headers: Option<&str>,
        trusted_proxies: Vec<String>,
        proxy_header: &str,
        partition_key_secret: Option<&[u8]>,
    ) -> PyResult<Self> {
        Rules::new(headers, &trusted_proxies, proxy_header, partition_key_secret)
            .map(|inner| HttpRules { inner })
            .map_err(|e| to_py_err(py, e))
    }

    /// The header the trusted proxies set, in lower case: `x-forwarded-for` or `forwarded`.
    #[getter]
    fn proxy_header(&self) -> &'static str {
        self.inner.clients().header().name()
    }

    /// The key of a request from `peer` (None: unknown): its address, IPv6 by /56; behind a
    /// trusted proxy, the right-most untrusted address of `proxy_header_value` (the proxy
    /// header's lines joined by commas; None: absent).
    #[pyo3(signature = (peer, proxy_header_value))]
    fn client_key(&self, peer: Option<&str>, proxy_header_value: Option<&str>) -> String {
        self.inner.client_key(peer, proxy_header_value)
    }

    /// The rate-limit header fields, as (name, value) pairs, of the decisions in `reports`:
    /// (policy name, the limiter's window in seconds or None, its Decision) in order; `key` is
    /// the request's key (draft-11's `pk`).
    fn fields(
        &self,
        reports: Vec<(String, Option<f64>, Bound<'_, PyAny>)>,
        key: &str,
    ) -> PyResult<Vec<(&'static str, String)>> {
        let reports = reports
            .iter()
            .map(|(name, window, decision)| report(name, *window, decision))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(self.inner.fields(&reports, key))
    }
}
