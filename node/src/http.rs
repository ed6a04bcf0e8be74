//! The HTTP middleware's rules (`ratekeeper::http`) for `node/http/`: one `NativeHttpRules` per
//! middleware, built from its options when the middleware is; per request the client key and
//! the rate-limit header fields of the decisions it got.

use napi::bindgen_prelude::{Buffer, Either, Null};
use napi::Env;
use napi_derive::napi;
use ratekeeper::http::{Report, ReportLimit, Rules};
use ratekeeper::Error;

use crate::decision::duration_of_ms;

/// One limit of a multi-limit decision, as a decision's `limits` gives it.
#[napi(object, object_to_js = false)]
pub struct HttpLimitView {
    /// The span this limit covers, in milliseconds.
    pub window_ms: f64,
    /// The limit's size.
    pub limit: f64,
    /// What is left of it.
    pub remaining: f64,
    /// 0 if this limit admits the call; otherwise the milliseconds until it would.
    pub retry_after_ms: f64,
    /// Milliseconds until this limit is back to full.
    pub reset_after_ms: f64,
}

/// The fields of a decision the header fields read (a `Decision` is one).
#[napi(object, object_to_js = false)]
pub struct HttpDecisionView {
    /// Whether the call was admitted.
    pub allowed: bool,
    /// The limit that binds.
    pub limit: f64,
    /// What is left of it.
    pub remaining: f64,
    /// 0 when allowed; otherwise the milliseconds until the same call could succeed.
    pub retry_after_ms: f64,
    /// Milliseconds until the limiter is back to full.
    pub reset_after_ms: f64,
    /// A multi-limit limiter's limits (null or absent: one limit).
    pub limits: Option<Either<Vec<HttpLimitView>, Null>>,
}

/// What one limiter decided about a request.
#[napi(object, object_to_js = false)]
pub struct HttpReport {
    /// The policy's name (the limiter's).
    pub name: String,
    /// The limiter's `windowMs` (null or absent: none).
    pub window_ms: Option<Either<f64, Null>>,
    /// Its decision.
    pub decision: HttpDecisionView,
}

/// A value JavaScript may give as null or leave out.
fn given<T>(value: &Option<Either<T, Null>>) -> Option<&T> {
    match value {
        Some(Either::A(v)) => Some(v),
        _ => None,
    }
}

fn count(value: f64) -> u64 {
    value.max(0.0) as u64
}

fn report(r: &HttpReport) -> Report<'_> {
    let d = &r.decision;
    Report {
        name: &r.name,
        decision: ReportLimit {
            limit: count(d.limit),
            remaining: count(d.remaining),
            reset_after: duration_of_ms(d.reset_after_ms),
            retry_after: duration_of_ms(d.retry_after_ms),
            allowed: d.allowed,
            window: given(&r.window_ms).copied().map(duration_of_ms),
        },
        limits: given(&d.limits)
            .into_iter()
            .flatten()
            .map(|l| {
                ReportLimit::of_limit(
                    duration_of_ms(l.window_ms),
                    count(l.limit),
                    count(l.remaining),
                    duration_of_ms(l.reset_after_ms),
                    duration_of_ms(l.retry_after_ms),
                )
            })
            .collect(),
    }
}

/// Internal (http/core.js): one middleware's HTTP options, validated by the core.
#[napi]
pub struct NativeHttpRules {
    inner: Rules,
}

#[napi]
impl NativeHttpRules {
    /// `standardHeaders` (a form name, null: none), `trustedProxies`, `proxyHeader` and
    /// `partitionKeySecret` (bytes); throws `ERR_INVALID_ARGUMENT` naming the bad option, never
    /// showing the secret.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        standard_headers: Option<String>,
        trusted_proxies: Vec<String>,
        proxy_header: String,
        partition_key_secret: Option<Buffer>,
    ) -> napi::Result<Self> {
        let rules =
            Rules::new(standard_headers.as_deref(), &trusted_proxies, &proxy_header, partition_key_secret.as_deref())
                .map_err(|e| match e {
                    // The core's `headers` is this middleware's `standardHeaders` (express-rate-limit's).
                    Error::InvalidArgument { parameter, message } if parameter == "headers" => {
                        Error::invalid("standardHeaders", message)
                    }
                    other => other,
                });
        Ok(NativeHttpRules { inner: crate::error::core(&env, rules)? })
    }

    /// The header the trusted proxies set, in lower case.
    #[napi(getter)]
    pub fn proxy_header(&self) -> &'static str {
        self.inner.clients().header().name()
    }

    /// The key of a request from `peer`; `proxyHeaderValue` is the proxy header's lines joined
    /// by commas (read only behind a trusted proxy).
    #[napi]
    pub fn client_key(&self, peer: Option<String>, proxy_header_value: Option<String>) -> String {
        self.inner.client_key(peer.as_deref(), proxy_header_value.as_deref())
    }

    /// The rate-limit header fields of `reports` for a request counted under `key`, as
    /// `[name, value, name, value, …]`.
    #[napi]
    pub fn fields(&self, reports: Vec<HttpReport>, key: String) -> Vec<String> {
        let reports: Vec<Report<'_>> = reports.iter().map(report).collect();
        self.inner.fields(&reports, &key).into_iter().flat_map(|(name, value)| [name.to_owned(), value]).collect()
    }
}
