//! The HTTP middleware's rules (`ratekeeper::http`) for `node/http/`: one `NativeHttpRules` per
//! middleware, built from its options when the middleware is; per request the client key and
//! the rate-limit header fields of the decisions it got.
//!
//! The decisions cross as numbers in one `Float64Array` (see [`NativeHttpRules::fields`]), and
//! the limiters' names and windows are given once, when the middleware is built: reading a
//! decision object's properties through N-API cost several times the rendering itself, which
//! is on every request's path (issue #48: the Node middleware against its peers).
//!
//! The middleware calls the rules through plain N-API functions bound to them
//! ([`NativeHttpRules::fields_function`], [`NativeHttpRules::client_key_function`]), not through
//! napi-rs's methods: a method's glue (the instance unwrapped, a native-borrow scope per call,
//! see `hot_calls`) cost more than rendering the fields, once per request (the fields through
//! the method took about 1.9x the JavaScript they replaced, through the bound function about
//! 0.6x: docs/src/benchmarks.md). The methods stay, with the same bodies, for the tests and
//! `bench/node/http/fields.js`.

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{Buffer, Either, FromNapiValue, Null};
use napi::{sys, Env};
use napi_derive::napi;
use ratekeeper::http::{Report, ReportLimit, Rules};
use ratekeeper::Error;

use crate::bridge::ReplyValue;
use crate::decision::duration_of_ms;
use crate::hot_calls::{arguments_and_data, respond};

/// A policy the fields may name: a limiter of the middleware, with its window.
#[napi(object, object_to_js = false)]
pub struct HttpPolicy {
    /// The policy's name (the limiter's).
    pub name: String,
    /// The limiter's `windowMs` (null or absent: none).
    pub window_ms: Option<Either<f64, Null>>,
}

/// One middleware's rules and the policies its fields may name: what the methods and the bound
/// functions share (each bound function owns a reference).
struct Renderer {
    inner: Rules,
    /// The policies' names and windows, by index.
    policies: Vec<(String, Option<Duration>)>,
}

impl Renderer {
    /// Writes the fields of the first `len` numbers of `packed` (see [`NativeHttpRules::fields`])
    /// for a request counted under `key` into `out`, as one line per name and one per value.
    fn write_fields(&self, packed: &[f64], len: usize, key: Option<&str>, out: &mut String) -> napi::Result<()> {
        let reports = packed
            .get(..len)
            .and_then(|packed| unpack(&self.policies, packed))
            .ok_or_else(|| napi::Error::from_reason("malformed packed decisions"))?;
        for (name, value) in self.inner.fields(&reports, key.unwrap_or_default()) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(name);
            out.push('\n');
            out.push_str(&value);
        }
        Ok(())
    }
}

/// Internal (http/core.js): one middleware's HTTP options, validated by the core.
#[napi]
pub struct NativeHttpRules {
    rules: Arc<Renderer>,
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
        Ok(NativeHttpRules { rules: Arc::new(Renderer { inner: crate::error::core(&env, rules)?, policies }) })
    }

    /// The header the trusted proxies set, in lower case.
    #[napi(getter)]
    pub fn proxy_header(&self) -> &'static str {
        self.rules.inner.clients().header().name()
    }

    /// The key of a request from `peer`; `proxyHeaderValue` is the proxy header's lines joined
    /// by commas (read only behind a trusted proxy).
    #[napi]
    pub fn client_key(&self, peer: Option<String>, proxy_header_value: Option<String>) -> String {
        self.rules.inner.client_key(peer.as_deref(), proxy_header_value.as_deref())
    }

    /// The rate-limit header fields of a request counted under `key` (read only for draft-11's
    /// `pk`: a middleware without a partition key secret leaves it out), as one line per name and
    /// one per value, in order (empty: none). The first `len` numbers of `packed` (a buffer
    /// reused from call to call) hold each decision in order:
    /// policy index, allowed (0 or 1), limit, remaining, retryAfterMs, resetAfterMs, the number
    /// of its limits, then per limit windowMs, limit, remaining, retryAfterMs, resetAfterMs.
    #[napi]
    pub fn fields(&self, packed: &[f64], len: u32, key: Option<String>) -> napi::Result<String> {
        let mut out = String::new();
        self.rules.write_fields(packed, len as usize, key.as_deref(), &mut out)?;
        Ok(out)
    }

    /// `fields` as a plain function bound to these rules: the middleware's per-request call,
    /// without napi-rs's per-call glue (node/src/http.rs says why).
    #[napi(ts_return_type = "(packed: Float64Array, len: number, key?: string | undefined | null) => string")]
    pub fn fields_function(&self, env: Env) -> napi::Result<ReplyValue> {
        bound(&env, c"fields", fields_call, &self.rules)
    }

    /// `clientKey` as a plain function bound to these rules (as `fieldsFunction`).
    #[napi(
        ts_return_type = "(peer?: string | undefined | null, proxyHeaderValue?: string | undefined | null) => string"
    )]
    pub fn client_key_function(&self, env: Env) -> napi::Result<ReplyValue> {
        bound(&env, c"clientKey", client_key_call, &self.rules)
    }
}

type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// A JavaScript function calling `callback` with `rules` as its data: it holds one reference,
/// given back when the function is collected.
fn bound(env: &Env, name: &CStr, callback: Callback, rules: &Arc<Renderer>) -> napi::Result<ReplyValue> {
    let data = Arc::into_raw(Arc::clone(rules)) as *mut c_void;
    let mut function = ptr::null_mut();
    // SAFETY: on the calling environment's thread, during a call; `name` is NUL-terminated and
    // its length is passed; `callback` has N-API's signature.
    let created = napi::check_status!(unsafe {
        sys::napi_create_function(
            env.raw(),
            name.as_ptr(),
            name.to_bytes().len() as isize,
            Some(callback),
            data,
            &mut function,
        )
    })
    .and_then(|()| {
        // SAFETY: as above; `function` was just made; `release` takes back the reference
        // `data` holds, once, when the function is collected.
        napi::check_status!(unsafe {
            sys::napi_add_finalizer(env.raw(), function, data, Some(release), ptr::null_mut(), ptr::null_mut())
        })
    });
    if let Err(error) = created {
        // SAFETY: `data` came from `Arc::into_raw` above and no finalizer owns it: the function
        // (if made) is dropped unreturned and never called.
        drop(unsafe { Arc::from_raw(data as *const Renderer) });
        return Err(error);
    }
    Ok(ReplyValue(function))
}

/// The finalizer of a bound function: gives back its reference to the rules.
unsafe extern "C" fn release(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Arc::into_raw` pointer `bound` registered this finalizer with, and
    // N-API runs a finalizer once.
    drop(unsafe { Arc::from_raw(data as *const Renderer) });
}

thread_local! {
    /// The text of the last fields rendered on this thread, reused from call to call.
    static FIELDS: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The rules a bound function was made with.
///
/// # Safety
/// `data` must be the data pointer of a call to a function made by [`bound`], during the call.
unsafe fn rules_of<'a>(data: *mut c_void) -> &'a Renderer {
    // SAFETY: `bound` made `data` from an `Arc<Renderer>` whose reference the function holds
    // until its finalizer runs, which cannot happen while the function is being called.
    unsafe { &*(data as *const Renderer) }
}

/// The numbers of a `Float64Array` argument, borrowed for the current call.
///
/// # Safety
/// `env` and `value` must be the current call's; the slice must not outlive the call, and no
/// JavaScript may run while it is held (none could detach or resize the buffer).
unsafe fn float64s<'a>(env: sys::napi_env, value: sys::napi_value) -> napi::Result<&'a [f64]> {
    let (mut kind, mut length, mut data) = (0, 0usize, ptr::null_mut());
    // SAFETY: the caller passes the current call's env and one of its argument values; the out
    // pointers are to locals (the array buffer and offset are not asked for).
    let status = unsafe {
        sys::napi_get_typedarray_info(env, value, &mut kind, &mut length, &mut data, ptr::null_mut(), ptr::null_mut())
    };
    if status != sys::Status::napi_ok || kind != sys::TypedarrayType::float64_array {
        return Err(napi::Error::new(napi::Status::InvalidArg, "packed must be a Float64Array"));
    }
    if length == 0 || data.is_null() {
        return Ok(&[]);
    }
    // SAFETY: N-API gave the address of the array's first element (its byte offset applied)
    // and its length in elements; a Float64Array's elements are aligned f64s; the caller holds
    // the slice only during the call, while no JavaScript runs.
    Ok(unsafe { std::slice::from_raw_parts(data as *const f64, length) })
}

/// `text` as a JavaScript string (Latin-1, a plain copy, when it is ASCII, as the fields are).
///
/// # Safety
/// `env` must be the current call's.
unsafe fn js_string(env: sys::napi_env, text: &str) -> napi::Result<sys::napi_value> {
    let mut value = ptr::null_mut();
    let (bytes, length) = (text.as_ptr() as *const std::ffi::c_char, text.len() as isize);
    // SAFETY: `env` is the current call's; `bytes` points to `length` bytes of `text`, which
    // are ASCII (so Latin-1) in the first case and UTF-8 in the second.
    napi::check_status!(unsafe {
        if text.is_ascii() {
            sys::napi_create_string_latin1(env, bytes, length, &mut value)
        } else {
            sys::napi_create_string_utf8(env, bytes, length, &mut value)
        }
    })?;
    Ok(value)
}

/// `fields(packed, len, key?)`: [`NativeHttpRules::fields`] without napi-rs's glue.
unsafe extern "C" fn fields_call(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node calls this as the N-API callback `bound` registered, with its env and info,
    // and the function's data pointer is the one `bound` gave; the packed numbers are read
    // during the call, while no JavaScript runs.
    unsafe {
        let ([packed, len, key], data) = arguments_and_data::<3>(env, info);
        let rules = rules_of(data);
        respond(env, |_| {
            let packed = float64s(env, packed)?;
            let len = u32::from_napi_value(env, len)? as usize;
            let key = Option::<String>::from_napi_value(env, key)?;
            FIELDS.with_borrow_mut(|out| {
                out.clear();
                rules.write_fields(packed, len, key.as_deref(), out)?;
                js_string(env, out)
            })
        })
    }
}

/// `clientKey(peer?, proxyHeaderValue?)`: [`NativeHttpRules::client_key`] without napi-rs's glue.
unsafe extern "C" fn client_key_call(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: as in `fields_call`.
    unsafe {
        let ([peer, value], data) = arguments_and_data::<2>(env, info);
        let rules = rules_of(data);
        respond(env, |_| {
            let peer = Option::<String>::from_napi_value(env, peer)?;
            let value = Option::<String>::from_napi_value(env, value)?;
            js_string(env, &rules.inner.client_key(peer.as_deref(), value.as_deref()))
        })
    }
}
