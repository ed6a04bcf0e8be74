//! The one conversion of core errors into JavaScript: an `Error` with a stable `code`, the cause
//! in its message, and the details as properties.
//!
//! | core error | `code` | extra properties |
//! |---|---|---|
//! | `OverLimit` | `ERR_OVER_LIMIT` | `retryAfterMs` |
//! | `Shed` | `ERR_SHED` | |
//! | `LeaseLost` | `ERR_LEASE_LOST` | |
//! | `InvalidArgument` | `ERR_INVALID_ARGUMENT` | `parameter` (the JavaScript name) |
//! | `BackendUnavailable` | `ERR_BACKEND_UNAVAILABLE` | |
//! | `Timeout` | `ERR_TIMEOUT` | |
//! | `BackendRejected` | `ERR_BACKEND_REJECTED` | `redisCode` (`NOPERM`, `WRONGPASS`, `OOM`, ...) |
//! | a kind added later | `ERR_RATEKEEPER` | |
//! | a panic inside the addon (a bug) | `ERR_INTERNAL` | |

use std::borrow::Cow;
use std::ffi::CStr;
use std::ptr;

use napi::bindgen_prelude::{JsObjectValue, Object};
use napi::{sys, Env, JsValue, Unknown};
use ratekeeper::{Error, ErrorKind};

/// The JavaScript name of a parameter the core names in snake_case: durations given as numbers
/// are milliseconds in JavaScript, so the options carrying them end in `Ms` (positional
/// durations are strings with units and keep their plain names: `interval`, `duration`). Names not listed are camelCased (`max_keys` is
/// `maxKeys`), as napi-derive spells the fields of options objects.
pub fn js_parameter(core: &str) -> Cow<'_, str> {
    Cow::Borrowed(match core {
        "lock_timeout" => "lockTimeoutMs",
        "lease_ttl" => "leaseTtlMs",
        "wait_timeout" => "waitTimeoutMs",
        "max_pause" => "maxPauseMs",
        "block_for" => "blockForMs",
        "deny_cache" => "denyCache",
        "deadline" => "deadlineMs",
        "precision" => "precisionMs",
        "connect_timeout" => "connectTimeoutMs",
        "seconds_before_shedding" => "beforeSheddingMs",
        "seconds_to_shed_all" => "toShedAllMs",
        "allow_fallback" => "allowFallback",
        "base" => "baseMs",
        "jitter" => "jitterMs",
        "max_reschedules" => "maxReschedules",
        "retry_after" => "retryAfterMs",
        // The core's `FailurePolicy::Fallback { divisor }` is `failurePolicy: { fallback: n }` here.
        "divisor" => "failurePolicy.fallback",
        other => return crate::args::camel(other),
    })
}

/// The name a parameter has in JavaScript: a core parameter under its Node spelling, a field of
/// a JSON spec (an owned path such as `windows[1]` or `lock_timeout`) as the spec spells it.
#[allow(clippy::ptr_arg)] // which variant it is matters: a core name or a spec path
fn js_name<'a>(parameter: &'a Cow<'static, str>) -> Cow<'a, str> {
    match parameter {
        Cow::Borrowed(core) => js_parameter(core),
        Cow::Owned(path) => Cow::Borrowed(path),
    }
}

/// The stable `code` of a core error.
pub fn code(error: &Error) -> &'static CStr {
    match error.kind() {
        ErrorKind::OverLimit => c"ERR_OVER_LIMIT",
        ErrorKind::Shed => c"ERR_SHED",
        ErrorKind::LeaseLost => c"ERR_LEASE_LOST",
        ErrorKind::InvalidArgument => c"ERR_INVALID_ARGUMENT",
        ErrorKind::BackendUnavailable => c"ERR_BACKEND_UNAVAILABLE",
        ErrorKind::Timeout => c"ERR_TIMEOUT",
        ErrorKind::BackendRejected => c"ERR_BACKEND_REJECTED",
        _ => c"ERR_RATEKEEPER",
    }
}

/// The message: the core's, with the parameter under its JavaScript name.
fn message(error: &Error) -> String {
    match error {
        Error::InvalidArgument { parameter, message } => {
            format!("invalid argument `{}`: {message}", js_name(parameter))
        }
        other => other.to_string(),
    }
}

/// A JavaScript `Error` with `message` and `code`, and the properties `extra` sets; null only if
/// the environment can no longer create objects (it is shutting down).
fn error_object(
    env: sys::napi_env,
    code: &CStr,
    message: &str,
    extra: impl FnOnce(&mut Object<'_>) -> napi::Result<()>,
) -> sys::napi_value {
    let env = Env::from_raw(env);
    let made = env.create_error(napi::Error::new(napi::Status::GenericFailure, message)).and_then(|mut object| {
        // napi names the error's code after the status; ratekeeper's own code replaces it.
        object.set_named_property("code", code.to_str().unwrap_or("ERR_RATEKEEPER"))?;
        extra(&mut object)?;
        Ok(object.value().value)
    });
    made.unwrap_or(ptr::null_mut())
}

/// Converts a core error into a JavaScript `Error` object: the one place every kind is mapped.
/// Returns null only if the environment can no longer create objects (it is shutting down).
pub fn js_error_value(env: sys::napi_env, error: &Error) -> sys::napi_value {
    error_object(env, code(error), &message(error), |object| match error {
        Error::OverLimit { retry_after } => {
            object.set_named_property("retryAfterMs", retry_after.as_micros() as f64 / 1e3)
        }
        Error::InvalidArgument { parameter, .. } => object.set_named_property("parameter", js_name(parameter).as_ref()),
        Error::BackendRejected { code, .. } => object.set_named_property("redisCode", code.as_str()),
        _ => Ok(()),
    })
}

/// A core error as a napi error that throws (or rejects with) exactly the object above.
pub fn convert_error(env: &Env, error: Error) -> napi::Error {
    let value = js_error_value(env.raw(), &error);
    thrown(env, value, || message(&error))
}

/// A napi error that throws (or rejects with) `value`, an `Error` object just made in `env`'s
/// current call; `fallback`'s message when it is null (the environment is shutting down).
fn thrown(env: &Env, value: sys::napi_value, fallback: impl FnOnce() -> String) -> napi::Error {
    if value.is_null() {
        return napi::Error::new(napi::Status::GenericFailure, fallback());
    }
    // SAFETY: `value` is a non-null value made in `env` during the current call (we are on its
    // JavaScript thread, in its handle scope), and the napi error takes a reference to it
    // before the call returns.
    napi::Error::from(unsafe { Unknown::from_raw_unchecked(env.raw(), value) })
}

/// `?` for core results inside `#[napi]` functions: `core(env, result)?`.
pub fn core<T>(env: &Env, result: Result<T, Error>) -> napi::Result<T> {
    result.map_err(|e| convert_error(env, e))
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("ratekeeper panicked (a bug, please report it): {what}")
}

/// The `Error` (code `ERR_INTERNAL`) a caught panic becomes: a bug in ratekeeper, which never
/// unwinds into Node.
pub fn panic_error_value(env: sys::napi_env, panic: Box<dyn std::any::Any + Send>) -> sys::napi_value {
    error_object(env, c"ERR_INTERNAL", &panic_message(&*panic), |_| Ok(()))
}

/// A caught panic as a napi error that throws (or rejects with) its `ERR_INTERNAL` object.
pub fn panic_error(env: &Env, panic: Box<dyn std::any::Any + Send>) -> napi::Error {
    thrown(env, panic_error_value(env.raw(), panic), || "ratekeeper panicked".into())
}

/// Runs the body of a synchronous export, turning a panic into a thrown `ERR_INTERNAL` error.
pub fn guard<T>(env: &Env, body: impl FnOnce() -> napi::Result<T>) -> napi::Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(panic) => Err(panic_error(env, panic)),
    }
}
