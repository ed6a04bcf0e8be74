//! `rk_http_rules`: the rules every HTTP middleware applies the same way (`ratekeeper::http`),
//! for a middleware written over the C API (Ruby's Rack middleware; Go's can use it too): the
//! client key, the rate-limit header fields and the partition key, validated once.

use std::os::raw::c_char;
use std::time::Duration;

use ratekeeper::http::{duration_of_secs, Report, ReportLimit, Rules};

use crate::args::{arg_opt_str, arg_ref, arg_slice, arg_str, write_text, Out};
use crate::error::rk_status;
use crate::panic::{ffi_boundary, ffi_status};

/// \brief One middleware's HTTP options, validated: the header form, the trusted proxies and
/// the header they set, the partition key secret.
///
/// Opaque. Made by `rk_http_rules_new`; freed with `rk_http_rules_free`. Thread-safe and
/// immutable: one handle serves any number of threads.
#[allow(non_camel_case_types)]
pub struct rk_http_rules {
    inner: Rules,
}

/// \brief One limit of a multi-limit limiter's decision (`rk_http_report`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rk_http_limit {
    /// The span the limit covers, in seconds.
    pub window_secs: f64,
    /// The limit's size.
    pub limit: u64,
    /// What is left of it.
    pub remaining: u64,
    /// Seconds until it is full again.
    pub reset_after_secs: f64,
    /// Seconds until the call could succeed (0: this limit admits it).
    pub retry_after_secs: f64,
}

/// \brief What one limiter decided about a request, as the header fields read it.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rk_http_report {
    /// The policy's name (the limiter's), NUL-terminated UTF-8.
    pub name: *const c_char,
    /// The limiter's window in seconds (`rk_limiter_window`); 0 or less: none.
    pub window_secs: f64,
    /// Whether the call was admitted.
    pub allowed: bool,
    /// The limit that binds (2^53, an unlimited limiter's, announces nothing).
    pub limit: u64,
    /// What is left of it.
    pub remaining: u64,
    /// Seconds until the limiter is full again.
    pub reset_after_secs: f64,
    /// Seconds until the call could succeed (0 when allowed).
    pub retry_after_secs: f64,
    /// A multi-limit limiter's limits (a member each); NULL when `limits_len` is 0.
    pub limits: *const rk_http_limit,
    /// How many `limits` there are.
    pub limits_len: usize,
}

fn window(seconds: f64) -> Option<Duration> {
    (seconds > 0.0).then(|| duration_of_secs(seconds))
}

/// \brief Validates one middleware's HTTP options.
///
/// \param headers The header form: `"draft-11"`, `"draft-7"`, `"draft-6"` or `"legacy"`; NULL
///        sends no rate-limit fields.
/// \param trusted_proxies IP addresses or CIDR ranges (`10.0.0.0/8`, `fd00::/8`) whose proxy
///        header is believed; NULL when `trusted_proxies_len` is 0.
/// \param trusted_proxies_len How many there are.
/// \param proxy_header The one header those proxies set: `"X-Forwarded-For"` or `"Forwarded"`
///        (any case); NULL is `"X-Forwarded-For"`.
/// \param partition_key_secret The secret of draft-11's `pk` (at least 16 bytes; draft-11
///        only), or NULL for none. Never shown in an error.
/// \param partition_key_secret_len Its length in bytes.
/// \param rules_out Receives the rules; free them with `rk_http_rules_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT naming
///         `headers`, `trusted_proxies`, `proxy_header` or `partition_key_secret`.
#[no_mangle]
pub extern "C" fn rk_http_rules_new(
    headers: *const c_char,
    trusted_proxies: *const *const c_char,
    trusted_proxies_len: usize,
    proxy_header: *const c_char,
    partition_key_secret: *const u8,
    partition_key_secret_len: usize,
    rules_out: *mut *mut rk_http_rules,
) -> rk_status {
    ffi_status! {
        let out = Out::new("rules_out", rules_out)?;
        let headers = arg_opt_str("headers", headers)?;
        let trusted = arg_slice("trusted_proxies", trusted_proxies, trusted_proxies_len)?
            .iter()
            .map(|entry| arg_str("trusted_proxies", *entry))
            .collect::<Result<Vec<_>, _>>()?;
        let proxy_header = arg_opt_str("proxy_header", proxy_header)?.unwrap_or("X-Forwarded-For");
        let secret = if partition_key_secret.is_null() {
            None
        } else {
            Some(arg_slice("partition_key_secret", partition_key_secret, partition_key_secret_len)?)
        };
        let inner = Rules::new(headers, &trusted, proxy_header, secret)?;
        out.write(Box::into_raw(Box::new(rk_http_rules { inner })));
        Ok(())
    }
}

/// \brief The header the trusted proxies set, in lower case (`"x-forwarded-for"` or
/// `"forwarded"`): a static string; NULL for a NULL `rules`.
#[no_mangle]
pub extern "C" fn rk_http_rules_proxy_header(rules: *const rk_http_rules) -> *const c_char {
    ffi_boundary! {
        match arg_ref("rules", rules) {
            Ok(rules) => match rules.inner.clients().header().name() {
                "forwarded" => c"forwarded".as_ptr(),
                _ => c"x-forwarded-for".as_ptr(),
            },
            Err(_) => std::ptr::null(),
        }
    }
}

/// \brief The key a request is counted under when the application gives none: the client
/// address, IPv6 grouped by /56; behind a trusted proxy, the right-most address of the proxy
/// header that is not a trusted proxy.
///
/// Written like `rk_limiter_spec_json` (`snprintf`'s convention): at most `len - 1` bytes and a
/// NUL, the full length in `*out_n`.
///
/// \param rules The rules.
/// \param peer The peer address as the server gives it (`v4`, `v4:port`, `[v6]:port`); NULL:
///        none (the key is `unknown`).
/// \param proxy_header_value The value of `rk_http_rules_proxy_header`'s header (its lines
///        joined by commas), or NULL when absent. Read only when the peer is trusted.
/// \param buf Where to write the key; may be NULL only when `len` is 0.
/// \param len The size of `buf` in bytes.
/// \param out_n Receives the full length of the key in bytes, excluding the NUL.
/// \return #RK_OK, #RK_NULL_PARAMETER or #RK_INVALID_UTF8.
#[no_mangle]
pub extern "C" fn rk_http_rules_client_key(
    rules: *const rk_http_rules,
    peer: *const c_char,
    proxy_header_value: *const c_char,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> rk_status {
    ffi_status! {
        let rules = arg_ref("rules", rules)?;
        let key = rules.inner.client_key(arg_opt_str("peer", peer)?, arg_opt_str("proxy_header_value", proxy_header_value)?);
        write_text(buf, len, out_n, &key)
    }
}

/// \brief The rate-limit header fields of a request's decisions, in the rules' form, as a JSON
/// array of `[name, value]` pairs in order (`[]`: none).
///
/// Written like `rk_limiter_spec_json` (`snprintf`'s convention).
///
/// \param rules The rules.
/// \param reports Each limiter's decision, in order; NULL when `reports_len` is 0.
/// \param reports_len How many there are.
/// \param key The request's key (draft-11's `pk` is its keyed hash).
/// \param buf Where to write the JSON; may be NULL only when `len` is 0.
/// \param len The size of `buf` in bytes.
/// \param out_n Receives the full length of the JSON in bytes, excluding the NUL.
/// \return #RK_OK, #RK_NULL_PARAMETER or #RK_INVALID_UTF8.
#[no_mangle]
pub extern "C" fn rk_http_rules_fields(
    rules: *const rk_http_rules,
    reports: *const rk_http_report,
    reports_len: usize,
    key: *const c_char,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> rk_status {
    ffi_status! {
        let rules = arg_ref("rules", rules)?;
        let key = arg_str("key", key)?;
        let mut read = Vec::with_capacity(reports_len);
        for r in arg_slice("reports", reports, reports_len)? {
            let limits = arg_slice("limits", r.limits, r.limits_len)?
                .iter()
                .map(|l| {
                    ReportLimit::of_limit(
                        duration_of_secs(l.window_secs),
                        l.limit,
                        l.remaining,
                        duration_of_secs(l.reset_after_secs),
                        duration_of_secs(l.retry_after_secs),
                    )
                })
                .collect();
            read.push(Report {
                name: arg_str("name", r.name)?,
                decision: ReportLimit {
                    limit: r.limit,
                    remaining: r.remaining,
                    reset_after: duration_of_secs(r.reset_after_secs),
                    retry_after: duration_of_secs(r.retry_after_secs),
                    allowed: r.allowed,
                    window: window(r.window_secs),
                },
                limits,
            });
        }
        let fields = rules.inner.fields(&read, key);
        let pairs: Vec<[&str; 2]> = fields.iter().map(|(name, value)| [*name, value.as_str()]).collect();
        // Strings only: serializing cannot fail.
        let json = serde_json::to_string(&pairs).unwrap_or_default();
        write_text(buf, len, out_n, &json)
    }
}

/// \brief Frees rules. NULL is ignored.
///
/// \param rules Rules from `rk_http_rules_new`, or NULL.
#[no_mangle]
pub extern "C" fn rk_http_rules_free(rules: *mut rk_http_rules) {
    ffi_boundary! {
        if !rules.is_null() {
            // SAFETY: the caller's contract: made by `rk_http_rules_new`, not freed before.
            drop(unsafe { Box::from_raw(rules) });
        }
    }
}
