//! The HTTP middleware's rules (`ratekeeper::http`) for `node/http/`: one `NativeHttpRules` per
//! middleware, built from its options when the middleware is; per request the client key and
//! the rate-limit header fields of the decisions it got.
//!
//! The decisions cross as numbers in one `Float64Array` (see [`NativeHttpRules::fields`]), and
//! the limiters' names and windows are given once, when the middleware is built: reading a
//! decision object's properties through N-API cost several times the rendering itself, which
//! is on every request's path (issue #48: the Node middleware against its peers).

use std::time::Duration;

use napi::bindgen_prelude::{Buffer, Either, Null};
use napi::Env;
use napi_derive::napi;
use ratekeeper::http::{Report, ReportLimit, Rules};
use ratekeeper::Error;

use crate::decision::duration_of_ms;

/// A policy the fields may name: a limiter of the middleware, with its window.
#[napi(object, object_to_js = false)]
pub struct HttpPolicy {
    /// The policy's name (the limiter's).
    pub name: String,
    /// The limiter's `windowMs` (null or absent: none).
    pub window_ms: Option<Either<f64, Null>>,
}

/// Internal (http/core.js): one middleware's HTTP options, validated by the core.
#[napi]
pub struct NativeHttpRules {
    inner: Rules,
    /// The policies' names and windows, by index.
    policies: Vec<(String, Option<Duration>)>,
}

fn count(value: f64) -> u64 {
    value.max(0.0) as u64
}

/// Reads the packed decisions (see [`NativeHttpRules::fields`]); `None` when malformed.
fn unpack<'a>(policies: &'a [(String, Option<Duration>)], packed: &[f64]) -> Option<Vec<Report<'a>>> {
    let mut reports = Vec::new();
    let mut rest = packed;
    while let [index, allowed, limit, remaining, retry_ms, reset_ms, limits, tail @ ..] = rest {
        let (name, window) = policies.get(*index as usize)?;
        let n = *limits as usize;
        let (each, after) = tail.split_at_checked(n.checked_mul(5)?)?;
        reports.push(Report {
            name,
            decision: ReportLimit {
                limit: count(*limit),
                remaining: count(*remaining),
                reset_after: duration_of_ms(*reset_ms),
                retry_after: duration_of_ms(*retry_ms),
                allowed: *allowed != 0.0,
                window: *window,
            },
            limits: each
                .chunks_exact(5)
                .map(|l| {
                    ReportLimit::of_limit(
                        duration_of_ms(l[0]),
                        count(l[1]),
                        count(l[2]),
                        duration_of_ms(l[4]),
                        duration_of_ms(l[3]),
                    )
                })
                .collect(),
        });
        rest = after;
    }
    rest.is_empty().then_some(reports)
}

#[napi]
impl NativeHttpRules {
    /// `standardHeaders` (a form name, null: none), `trustedProxies`, `proxyHeader`,
    /// `partitionKeySecret` (bytes) and the policies the fields may name (by index); throws
    /// `ERR_INVALID_ARGUMENT` naming the bad option, never showing the secret.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        standard_headers: Option<String>,
        trusted_proxies: Vec<String>,
        proxy_header: String,
        partition_key_secret: Option<Buffer>,
        policies: Vec<HttpPolicy>,
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
        let policies = policies
            .into_iter()
            .map(|p| {
                let window = match p.window_ms {
                    Some(Either::A(ms)) => Some(duration_of_ms(ms)),
                    _ => None,
                };
                (p.name, window)
            })
            .collect();
        Ok(NativeHttpRules { inner: crate::error::core(&env, rules)?, policies })
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

    /// The rate-limit header fields of a request counted under `key` (read only for draft-11's
    /// `pk`: a middleware without a partition key secret leaves it out), as one line per name and
    /// one per value, in order (empty: none). The first `len` numbers of `packed` (a buffer
    /// reused from call to call) hold each decision in order:
    /// policy index, allowed (0 or 1), limit, remaining, retryAfterMs, resetAfterMs, the number
    /// of its limits, then per limit windowMs, limit, remaining, retryAfterMs, resetAfterMs.
    #[napi]
    pub fn fields(&self, packed: &[f64], len: u32, key: Option<String>) -> napi::Result<String> {
        let reports = packed
            .get(..len as usize)
            .and_then(|packed| unpack(&self.policies, packed))
            .ok_or_else(|| napi::Error::from_reason("malformed packed decisions"))?;
        let mut out = String::new();
        for (name, value) in self.inner.fields(&reports, key.as_deref().unwrap_or_default()) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(name);
            out.push('\n');
            out.push_str(&value);
        }
        Ok(out)
    }
}
