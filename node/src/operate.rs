//! Operating a backend from JavaScript: the registry, live limits, metrics flushes and the
//! Prometheus exposition. Results cross as JSON text (index.js parses it), since their shape is
//! data, not a class; specs stay in seconds, as in every language.

use napi::{Env, Unknown};
use napi_derive::napi;
use serde_json::{json, Value};

use crate::args::{self, Js};
use crate::backend::Backend;
use crate::bridge::{run, Payload, ReplyValue};
use crate::error::guard;
use crate::runtime::CoreResult;

fn unix_ms(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

/// A canonical spec as a JSON value (it is JSON already).
fn spec_value(spec: &str) -> Value {
    serde_json::from_str(spec).unwrap_or(Value::Null)
}

/// `[{name, kind, spec, overrides: [{key, spec}], users, processes, firstSeenMs, lastSeenMs,
/// conflict, waiting}]`.
fn limiters_json(infos: Vec<ratekeeper::LimiterInfo>) -> String {
    let items: Vec<Value> = infos
        .into_iter()
        .map(|i| {
            let overrides: Vec<Value> =
                i.overrides.iter().map(|(key, spec)| json!({"key": key, "spec": spec_value(spec)})).collect();
            json!({
                "name": i.name,
                "kind": i.kind,
                "spec": spec_value(&i.spec),
                "overrides": overrides,
                "users": i.users,
                "processes": i.processes,
                "firstSeenMs": unix_ms(i.first_seen),
                "lastSeenMs": unix_ms(i.last_seen),
                "conflict": i.conflict,
                "waiting": i.waiting,
            })
        })
        .collect();
    Value::Array(items).to_string()
}

/// `[{name, kind, metrics}]`, metrics as `Metrics` reads them (times in milliseconds; the last
/// latency bucket's bound, infinite, is `null`).
fn metrics_json(metrics: Vec<(String, ratekeeper::Kind, ratekeeper::Metrics)>) -> String {
    let ms = |d: std::time::Duration| d.as_micros() as f64 / 1e3;
    let items: Vec<Value> = metrics
        .into_iter()
        .map(|(name, kind, m)| {
            let bounds = ratekeeper::LATENCY_BOUNDS.iter().map(|b| json!(ms(*b))).chain([Value::Null]);
            let buckets: Vec<Value> = bounds.zip(m.latency_buckets).map(|(le, n)| json!([le, n])).collect();
            json!({
                "name": name,
                "kind": kind.as_str(),
                "metrics": {
                    "allowed": m.allowed,
                    "refused": m.refused,
                    "errors": m.errors,
                    "failedOpen": m.failed_open,
                    "fellBack": m.fell_back,
                    "latencyCount": m.latency_count(),
                    "latencySumMs": ms(m.latency_sum),
                    "latencyBucketsMs": buckets,
                    "held": m.held,
                    "heldTimeMs": ms(m.held_time),
                    "immediate": m.immediate,
                    "waited": m.waited,
                    "waitTimeMs": ms(m.wait_time),
                    "overages": m.overages,
                    "reclaimed": m.reclaimed,
                    "pausesClamped": m.pauses_clamped,
                    "blocked": m.blocked,
                    "shadowRefused": m.shadow_refused,
                    "refusedLocally": m.refused_locally,
                    "settles": m.settles,
                    "settleCharged": m.settle_charged,
                    "settleRefunded": m.settle_refunded,
                    "specConflicts": m.spec_conflicts,
                    "paused": m.paused,
                    "released": m.released,
                    "leasesHeld": m.leases_held(),
                },
            })
        })
        .collect();
    Value::Array(items).to_string()
}

/// Reads an optional key argument (`undefined` or `null`: none).
fn opt_key(key: &Option<Unknown<'_>>) -> CoreResult<Option<String>> {
    match Js::opt(key) {
        Some(k) if !k.is_nullish() => Ok(Some(k.string("key")?)),
        _ => Ok(None),
    }
}

#[napi]
impl Backend {
    /// Starts timing this backend's calls for `durationsJson` (what `ratekeeper/otel` records
    /// into its duration histograms). Counted: each call needs its `stopObserving()`.
    #[napi]
    pub fn start_observing(&self) {
        self.inner.start_observing();
    }

    /// Identifies this backend within the process (what `ratekeeper/otel` keeps its tracers by;
    /// a limiter's `backendId`).
    #[napi(getter)]
    pub fn id(&self) -> f64 {
        self.inner.id() as f64
    }

    /// Ends one `startObserving()`; the durations counted so far stay readable.
    #[napi]
    pub fn stop_observing(&self) {
        self.inner.stop_observing();
    }

    /// The durations of this process's observed calls as JSON text, cumulative:
    /// `[{name, kind, call, outcome, counts, sumsNs}]`, `call` `"check"` or `"wait"`, `counts` the
    /// calls per bucket of `durationBounds()` (then the unbounded bucket), `sumsNs` their total
    /// durations in nanoseconds per bucket. Never the key.
    #[napi]
    pub fn durations_json(&self) -> String {
        let mut items = Vec::new();
        for (name, kind, all) in self.inner.durations() {
            for s in all {
                items.push(json!({
                    "name": name, "kind": kind.as_str(), "call": s.call.as_str(), "outcome": s.outcome,
                    "counts": s.counts, "sumsNs": s.sums_nanos,
                }));
            }
        }
        Value::Array(items).to_string()
    }

    /// Upper bounds (seconds) of the buckets of `durationsJson`.
    #[napi]
    pub fn duration_bounds() -> Vec<f64> {
        ratekeeper::observe::DURATION_BOUNDS.to_vec()
    }

    /// Every limiter the backend knows as JSON text (`backend.limiters()` parses it).
    #[napi(ts_return_type = "NativeReply")]
    pub fn limiters_json(&self, env: Env) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let backend = self.inner.clone();
            run(&env, false, async move { Ok(Payload::Text(limiters_json(backend.limiters().await?))) })
        })
    }

    /// Overrides `name`'s spec (JSON text), or one key's (`backend.setLimit` takes an object).
    #[napi(ts_args_type = "name: string, specJson: string, key?: string | null", ts_return_type = "NativeReply")]
    pub fn set_limit_json(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        spec_json: Option<Unknown<'_>>,
        key: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parsed = || -> CoreResult<(String, String, Option<String>)> {
                let name = args::required(Js::opt(&name), "name")?.string("name")?;
                let json = args::required(Js::opt(&spec_json), "spec")?.string("spec")?;
                Ok((name, json, opt_key(&key)?))
            };
            let backend = self.inner.clone();
            match parsed() {
                Ok((name, json, key)) => run(&env, false, async move {
                    backend.set_limit_json(&name, &json, key.as_deref()).await?;
                    Ok(Payload::Unit)
                }),
                Err(e) => run(&env, true, async move { Err(e) }),
            }
        })
    }

    /// Removes the override of `name`, or of one key of it.
    #[napi(ts_args_type = "name: string, key?: string | null", ts_return_type = "NativeReply")]
    pub fn clear_limit(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        key: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parsed = || -> CoreResult<(String, Option<String>)> {
                Ok((args::required(Js::opt(&name), "name")?.string("name")?, opt_key(&key)?))
            };
            let backend = self.inner.clone();
            match parsed() {
                Ok((name, key)) => run(&env, false, async move {
                    backend.clear_limit(&name, key.as_deref()).await?;
                    Ok(Payload::Unit)
                }),
                Err(e) => run(&env, true, async move { Err(e) }),
            }
        })
    }

    /// Sends this process's pending metric counts and registrations to Redis now.
    #[napi(ts_return_type = "NativeReply")]
    pub fn flush(&self, env: Env) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let backend = self.inner.clone();
            run(&env, false, async move {
                backend.flush().await?;
                Ok(Payload::Unit)
            })
        })
    }

    /// Every limiter's metrics as JSON text (`backend.metrics()` parses it).
    #[napi(ts_return_type = "NativeReply")]
    pub fn metrics_json(&self, env: Env, fleet: Option<bool>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let backend = self.inner.clone();
            let fleet = fleet.unwrap_or(false);
            run(&env, false, async move { Ok(Payload::Text(metrics_json(backend.metrics(fleet).await?))) })
        })
    }

    /// Every limiter's metrics in the Prometheus text exposition format (`fleet`: every
    /// process's, read from Redis).
    #[napi(ts_return_type = "NativeReply")]
    pub fn prometheus_text(&self, env: Env, fleet: Option<bool>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let backend = self.inner.clone();
            let fleet = fleet.unwrap_or(false);
            run(&env, false, async move { Ok(Payload::Text(backend.prometheus(fleet).await?)) })
        })
    }
}

/// Names this process's language in the registry (index.js calls it with Node's version).
#[napi]
pub fn set_client_language(language: String) {
    ratekeeper::set_client_language(&language);
}
