//! `backend.checkAll` / `acquireAll`: several limits decided in one atomic step, all or nothing
//! (see `ratekeeper::Backend::check_all`). index.js checks the shape of the parts and passes
//! each limiter by its handle; the core validates costs, keys and kinds, naming the part.

use napi::{Env, Unknown};
use napi_derive::napi;
use ratekeeper::params::timeout_from_millis;
use ratekeeper::Error;

use crate::args::Js;
use crate::backend::Backend;
use crate::bridge::{run, Payload, ReplyValue};
use crate::decision::Decision;
use crate::error::{core, guard};
use crate::limiter::{limiter_of_handle, Canceller};
use crate::options::{self, options, Handled};
use crate::runtime::CoreResult;

/// Options of `backend.acquireAll()`.
#[napi(object, object_to_js = false)]
#[derive(Default)]
pub struct AcquireAllOptions {
    /// How long to wait at most (default: the shortest of the parts' limiters' `waitTimeoutMs`;
    /// 0: do not wait).
    pub wait_timeout_ms: Option<f64>,
    /// Aborts the wait: the Promise then rejects with an `AbortError` (`code: 'ABORT_ERR'`).
    #[napi(ts_type = "AbortSignal")]
    #[allow(dead_code)] // index.js handles it; declared so that it is a known option
    pub signal: Option<Handled>,
}
options!(AcquireAllOptions { wait_timeout_ms, signal });

/// One part's decision in a [`CombinedDecision`] (index.js adds the part's `limiter`: the
/// public shape is `CombinedPart` in index.d.ts).
#[napi(object, object_from_js = false, js_name = "NativePartDecision")]
pub struct PartDecision {
    /// The part's key (absent: the limiter's shared key).
    pub key: Option<String>,
    /// The part's cost.
    pub cost: f64,
    /// What this part decided at the combination's instant. In a refused combination a part
    /// may say `allowed` (alone it would have passed) but consumed nothing and holds no lease.
    pub decision: Decision,
}

/// What `checkAll` decided: every part admitted (and consumed), or none consumed anything.
/// index.js adds each part's limiter and `release()` (the public shape is `CombinedDecision`
/// in index.d.ts).
#[napi(object, object_from_js = false, js_name = "NativeCombinedDecision")]
pub struct CombinedDecision {
    /// Whether every part was admitted; when false, no part consumed anything.
    pub allowed: bool,
    /// 0 when allowed; else the longest `retryAfterMs` of the parts that refused.
    pub retry_after_ms: f64,
    /// Each part's decision, in the order of the parts.
    pub parts: Vec<PartDecision>,
}

impl CombinedDecision {
    /// The JavaScript form of a core combined decision.
    pub fn new(c: ratekeeper::CombinedDecision) -> CombinedDecision {
        CombinedDecision {
            allowed: c.allowed,
            retry_after_ms: c.retry_after.as_micros() as f64 / 1e3,
            parts: c
                .parts
                .into_iter()
                .map(|p| {
                    let key = (!p.key.is_empty()).then_some(p.key);
                    PartDecision { cost: p.cost as f64, decision: Decision::new(p.decision, key.as_deref()), key }
                })
                .collect(),
        }
    }
}

/// The parts as index.js passes them: `(handle, key, cost)` each, already shaped.
type Parts = Vec<(ratekeeper::Limiter, Option<String>, u64)>;

/// Resolves the parts' handles; `true` when every part's backend is in-process.
fn parts_of(handles: &[u32], keys: Vec<Option<String>>, costs: &[f64]) -> CoreResult<(Parts, bool)> {
    if handles.len() != keys.len() || handles.len() != costs.len() {
        return Err(Error::invalid("parts", "must be { limiter, key, cost } objects"));
    }
    let mut local = true;
    let mut parts = Vec::with_capacity(handles.len());
    for (i, ((handle, key), cost)) in handles.iter().zip(keys).zip(costs).enumerate() {
        let (limiter, is_local) = limiter_of_handle(*handle)
            .ok_or_else(|| Error::invalid_field(format!("parts[{i}].limiter"), "must be a Limiter"))?;
        if !(cost.is_finite() && *cost >= 0.0 && cost.fract() == 0.0 && *cost <= 9_007_199_254_740_992.0) {
            return Err(Error::invalid_field(
                format!("parts[{i}].cost"),
                format!("must be a whole number 1 to 2^53, got {cost}"),
            ));
        }
        local &= is_local;
        parts.push((limiter, key, *cost as u64));
    }
    Ok((parts, local))
}

fn borrowed(parts: &Parts) -> Vec<(&ratekeeper::Limiter, Option<&str>, u64)> {
    parts.iter().map(|(l, k, c)| (l, k.as_deref(), *c)).collect()
}

#[napi]
impl Backend {
    /// Internal (index.js): `backend.checkAll(parts)`, the parts as handles, keys and costs.
    #[napi(
        ts_args_type = "handles: number[], keys: Array<string | null>, costs: number[]",
        ts_return_type = "NativeReply"
    )]
    pub fn check_all(
        &self,
        env: Env,
        handles: Vec<u32>,
        keys: Vec<Option<String>>,
        costs: Vec<f64>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let (parts, local) = core(&env, parts_of(&handles, keys, &costs))?;
            let backend = self.inner.clone();
            run(&env, local, async move { Ok(Payload::Combined(backend.check_all(&borrowed(&parts)).await?)) })
        })
    }

    /// Internal (index.js): `backend.acquireAll(parts, options)`, the parts as handles, keys
    /// and costs; `canceller` aborts the wait.
    #[napi(
        ts_args_type = "handles: number[], keys: Array<string | null>, costs: number[], options?: AcquireAllOptions, canceller?: unknown",
        ts_return_type = "NativeReply"
    )]
    pub fn acquire_all(
        &self,
        env: Env,
        handles: Vec<u32>,
        keys: Vec<Option<String>>,
        costs: Vec<f64>,
        options: Option<Unknown<'_>>,
        canceller: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parse = || {
                let (parts, local) = parts_of(&handles, keys, &costs)?;
                let o = options::optional::<AcquireAllOptions>(&options)?.unwrap_or_default();
                let wait = o.wait_timeout_ms.map(|ms| timeout_from_millis("wait_timeout", ms)).transpose()?;
                let cancel = match Js::opt(&canceller) {
                    Some(c) => Some(c.external::<Canceller>("canceller")?.0.subscribe()),
                    None => None,
                };
                Ok((parts, local, wait, cancel))
            };
            let (parts, local, wait, cancel) = core(&env, parse())?;
            let backend = self.inner.clone();
            run(&env, local, async move {
                let borrowed = borrowed(&parts);
                let acquired = backend.acquire_all(&borrowed, wait);
                let combined = match cancel {
                    None => acquired.await?,
                    Some(mut cancelled) => tokio::select! {
                        combined = acquired => combined?,
                        _ = cancelled.wait_for(|c| *c) => {
                            return Err(Error::Timeout { message: "the wait was aborted".into() })
                        }
                    },
                };
                Ok(Payload::Combined(combined))
            })
        })
    }
}
