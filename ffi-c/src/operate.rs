//! Operating a backend from C: live limits, the registry, metrics flushes and the Prometheus
//! exposition. Variable-length results are strings the library allocates and
//! `rk_string_free` frees.

use std::ffi::CString;
use std::os::raw::c_char;

use ratekeeper::Error;

use crate::args::{arg_opt_str, arg_ref, arg_str, Out};
use crate::backend::rk_backend;
use crate::error::rk_status;
use crate::panic::{ffi_boundary, ffi_status};

/// Hands `text` to the caller as a NUL-terminated string it frees with `rk_string_free`.
fn publish_string(out: Out<*mut c_char>, text: String) -> Result<(), crate::error::Failure> {
    let text = CString::new(text).map_err(|_| Error::invalid("text", "contains a NUL byte"))?;
    out.write(text.into_raw());
    Ok(())
}

/// \brief Overrides the spec of limiter `name`, or of one of its keys, in every process using
/// the backend.
///
/// On Redis every process applies it within a fraction of a second (this one at once), with no
/// extra round trip per call; the limiters keep their state. The override applies to limiters of
/// its own kind only: on Redis, a spec of another kind than the registered limiter's is refused.
/// Nothing is written when an argument is invalid.
///
/// \param backend The backend.
/// \param name The limiter's name.
/// \param spec_json The spec, as for `rk_limiter_new_from_json` (durations in seconds).
/// \param key One key of the limiter, or NULL for the whole limiter.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT (naming the bad
///         field), #RK_BACKEND_UNAVAILABLE, #RK_TIMEOUT or #RK_BACKEND_REJECTED.
#[no_mangle]
pub extern "C" fn rk_backend_set_limit(
    backend: *const rk_backend,
    name: *const c_char,
    spec_json: *const c_char,
    key: *const c_char,
) -> rk_status {
    ffi_status! {
        let backend = arg_ref("backend", backend)?;
        let name = arg_str("name", name)?;
        let spec_json = arg_str("spec_json", spec_json)?;
        let key = arg_opt_str("key", key)?;
        backend.inner.set_limit_json_blocking(name, spec_json, key)?;
        Ok(())
    }
}

/// \brief Removes the override of limiter `name`, or of one of its keys (nothing if none).
///
/// \param backend The backend.
/// \param name The limiter's name.
/// \param key One key of the limiter, or NULL for the whole limiter.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8, #RK_INVALID_ARGUMENT,
///         #RK_BACKEND_UNAVAILABLE, #RK_TIMEOUT or #RK_BACKEND_REJECTED.
#[no_mangle]
pub extern "C" fn rk_backend_clear_limit(
    backend: *const rk_backend,
    name: *const c_char,
    key: *const c_char,
) -> rk_status {
    ffi_status! {
        let backend = arg_ref("backend", backend)?;
        let name = arg_str("name", name)?;
        let key = arg_opt_str("key", key)?;
        backend.inner.clear_limit_blocking(name, key)?;
        Ok(())
    }
}

/// \brief Sends this process's pending metric counts and limiter registrations to Redis now
/// (they are sent once a second anyway): call it before a short-lived process exits.
///
/// \param backend The backend.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_BACKEND_UNAVAILABLE, #RK_TIMEOUT or
///         #RK_BACKEND_REJECTED.
#[no_mangle]
pub extern "C" fn rk_backend_flush(backend: *const rk_backend) -> rk_status {
    ffi_status! {
        let backend = arg_ref("backend", backend)?;
        backend.inner.flush_blocking()?;
        Ok(())
    }
}

/// \brief Every limiter the backend knows, as a JSON array.
///
/// On Redis, the registry: every limiter any process in any language used in the last 90 days;
/// on memory, this process's. Each element has `name`, `kind`, `spec` (an object),
/// `overrides` (`[{"key": null | "...", "spec": {...}}]`), `users`, `processes`,
/// `first_seen_ms` and `last_seen_ms` (Unix milliseconds), `conflict` (`null`, or what the
/// registry reported in the last three minutes about a use of the name it could not take:
/// another kind used by a live process, or an override of another kind) and `waiting` (`true`
/// for an override no process has used yet: `kind` and `spec` are the override's).
///
/// \param backend The backend.
/// \param json_out Receives the JSON text; free it with `rk_string_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_BACKEND_UNAVAILABLE, #RK_TIMEOUT or
///         #RK_BACKEND_REJECTED.
#[no_mangle]
pub extern "C" fn rk_backend_limiters_json(backend: *const rk_backend, json_out: *mut *mut c_char) -> rk_status {
    ffi_status! {
        let out = Out::new("json_out", json_out)?;
        let backend = arg_ref("backend", backend)?;
        let infos = backend.inner.limiters_blocking()?;
        let ms = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let spec = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap_or(serde_json::Value::Null);
        let items: Vec<serde_json::Value> = infos
            .iter()
            .map(|i| {
                serde_json::json!({
                    "name": i.name,
                    "kind": i.kind,
                    "spec": spec(&i.spec),
                    "overrides": i.overrides.iter().map(|(k, s)| serde_json::json!({"key": k, "spec": spec(s)})).collect::<Vec<_>>(),
                    "users": i.users,
                    "processes": i.processes,
                    "first_seen_ms": ms(i.first_seen),
                    "last_seen_ms": ms(i.last_seen),
                    "conflict": i.conflict,
                    "waiting": i.waiting,
                })
            })
            .collect();
        publish_string(out, serde_json::Value::Array(items).to_string())
    }
}

/// \brief Every limiter's metrics, as a JSON array.
///
/// Each element is `{"name", "kind", "metrics"}`; `metrics` has `allowed`, `refused`, `errors`,
/// `failed_open`, `fell_back` (checks by outcome), `latency_count`, `latency_sum_us` and
/// `latency_buckets_us` (`[[upper bound in µs or null for infinite, count], ...]`, not
/// cumulative; checks that went to Redis), and for concurrent limiters `held`, `held_time_us`,
/// `immediate`, `waited`, `wait_time_us`, `overages`, `reclaimed`; `pauses_clamped` counts pauses
/// shortened to the limiter's `max_pause`; `blocked` counts checks refused by a block;
/// `shadow_refused` the checks a limiter in shadow mode would have refused and admitted instead;
/// `refused_locally` the checks refused from the deny cache; `settles` the settles applied
/// (a repeat is not counted), `settle_charged` and `settle_refunded` the units they charged and
/// asked to refund; `spec_conflicts` the registrations that found the name used with another
/// spec by a live process.
///
/// \param backend The backend.
/// \param fleet False for this process's metrics; true for every process's (read from Redis
///        after flushing this one's; the same as false on memory).
/// \param json_out Receives the JSON text; free it with `rk_string_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_BACKEND_UNAVAILABLE, #RK_TIMEOUT or
///         #RK_BACKEND_REJECTED.
#[no_mangle]
pub extern "C" fn rk_backend_metrics_json(
    backend: *const rk_backend,
    fleet: bool,
    json_out: *mut *mut c_char,
) -> rk_status {
    ffi_status! {
        let out = Out::new("json_out", json_out)?;
        let backend = arg_ref("backend", backend)?;
        let us = |d: std::time::Duration| d.as_micros() as u64;
        let items: Vec<serde_json::Value> = backend
            .inner
            .metrics_blocking(fleet)?
            .into_iter()
            .map(|(name, kind, m)| {
                let bounds = ratekeeper::LATENCY_BOUNDS.iter().map(|b| serde_json::json!(us(*b))).chain([serde_json::Value::Null]);
                let buckets: Vec<serde_json::Value> = bounds.zip(m.latency_buckets).map(|(le, n)| serde_json::json!([le, n])).collect();
                serde_json::json!({
                    "name": name,
                    "kind": kind.as_str(),
                    "metrics": {
                        "allowed": m.allowed,
                        "refused": m.refused,
                        "errors": m.errors,
                        "failed_open": m.failed_open,
                        "fell_back": m.fell_back,
                        "latency_count": m.latency_count(),
                        "latency_sum_us": us(m.latency_sum),
                        "latency_buckets_us": buckets,
                        "held": m.held,
                        "held_time_us": us(m.held_time),
                        "immediate": m.immediate,
                        "waited": m.waited,
                        "wait_time_us": us(m.wait_time),
                        "overages": m.overages,
                        "reclaimed": m.reclaimed,
                        "pauses_clamped": m.pauses_clamped,
                        "blocked": m.blocked,
                        "shadow_refused": m.shadow_refused,
                        "refused_locally": m.refused_locally,
                        "settles": m.settles,
                        "settle_charged": m.settle_charged,
                        "settle_refunded": m.settle_refunded,
                        "spec_conflicts": m.spec_conflicts,
                    },
                })
            })
            .collect();
        publish_string(out, serde_json::Value::Array(items).to_string())
    }
}

/// \brief Every limiter's metrics in the Prometheus text exposition format (version 0.0.4).
///
/// \param backend The backend.
/// \param fleet False for this process's metrics; true for every process's (read from Redis
///        after flushing this one's; the same as false on memory).
/// \param text_out Receives the text; free it with `rk_string_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_BACKEND_UNAVAILABLE, #RK_TIMEOUT or
///         #RK_BACKEND_REJECTED.
#[no_mangle]
pub extern "C" fn rk_backend_prometheus(
    backend: *const rk_backend,
    fleet: bool,
    text_out: *mut *mut c_char,
) -> rk_status {
    ffi_status! {
        let out = Out::new("text_out", text_out)?;
        let backend = arg_ref("backend", backend)?;
        publish_string(out, backend.inner.prometheus_blocking(fleet)?)
    }
}

/// \brief Frees a string the library returned (`rk_backend_limiters_json`,
/// `rk_backend_metrics_json`, `rk_backend_prometheus`). NULL is ignored.
///
/// \param s The string, or NULL.
#[no_mangle]
pub extern "C" fn rk_string_free(s: *mut c_char) {
    ffi_boundary! {
        if !s.is_null() {
            // SAFETY: the caller's contract: made by `publish_string`, not freed before.
            drop(unsafe { CString::from_raw(s) });
        }
    }
}
