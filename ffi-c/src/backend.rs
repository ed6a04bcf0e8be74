//! `rk_backend`: where limiter state lives (memory, Redis, Redis Cluster).

use std::os::raw::c_char;

use ratekeeper::params::duration_from_secs;
use ratekeeper::{Backend, Error, FailurePolicy, MemoryConfig, RedisConfig};

use crate::args::{arg_opt_str, arg_slice, arg_str, Out};
use crate::error::{rk_status, Failure};
use crate::panic::{ffi_boundary, ffi_status};

/// \brief A place where limiter state lives: an in-process memory backend, a Redis server or a
/// Redis Cluster.
///
/// Opaque. Made by `rk_backend_new_memory`, `rk_backend_new_memory_with`,
/// `rk_backend_new_redis`, `rk_backend_new_redis_cluster` or `rk_backend_new_from_json`; freed
/// with `rk_backend_free`.
/// Thread-safe: one handle may be used from any number of threads at once. Limiters keep what
/// they need of their backend alive, so a backend may be freed while its limiters are in use.
/// Every backend built for the same Redis URL in one process shares one connection set.
#[allow(non_camel_case_types)]
pub struct rk_backend {
    pub(crate) inner: Backend,
}

/// \brief What a Redis backend does when Redis cannot answer within the deadline.
///
/// Passed to `rk_backend_new_redis` and `rk_backend_new_redis_cluster` as a `uint32_t`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum rk_failure_policy {
    /// Fail the call with #RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT (the default).
    RK_FAIL_CLOSED = 0,
    /// Allow the call (a concurrent limiter's lease then has fencing token 0 and guards nothing).
    RK_FAIL_OPEN = 1,
    /// An in-process memory limiter takes over with `1/fallback_divisor` of every limit.
    RK_FALLBACK = 2,
}

fn failure_policy(policy: u32, divisor: u32) -> Result<FailurePolicy, Failure> {
    Ok(match policy {
        0 => FailurePolicy::FailClosed,
        1 => FailurePolicy::FailOpen,
        // Checked here so the error names the C parameter (the core calls it `divisor`).
        2 if divisor == 0 => {
            return Err(Error::invalid("fallback_divisor", "must be at least 1 with RK_FALLBACK").into())
        }
        2 => FailurePolicy::Fallback { divisor },
        other => {
            return Err(Error::invalid(
                "failure_policy",
                format!("must be RK_FAIL_CLOSED (0), RK_FAIL_OPEN (1) or RK_FALLBACK (2), got {other}"),
            )
            .into())
        }
    })
}

/// Applies the options shared by both Redis constructors and builds the backend.
fn redis_backend(
    mut config: RedisConfig,
    prefix: *const c_char,
    policy: u32,
    fallback_divisor: u32,
    deadline_secs: f64,
) -> Result<Backend, Failure> {
    if let Some(prefix) = arg_opt_str("prefix", prefix)? {
        config = config.prefix(prefix);
    }
    config = config.failure_policy(failure_policy(policy, fallback_divisor)?);
    if deadline_secs != 0.0 {
        config = config.deadline(duration_from_secs("deadline", deadline_secs)?);
    }
    Ok(Backend::redis_with(config)?)
}

/// Hands a new backend to the caller; the registry (`rk_backend_limiters_json`) lists this
/// process's limiters as used from C.
pub(crate) fn publish(out: Out<*mut rk_backend>, inner: Backend) {
    publish_as(out, inner, "c");
}

/// `publish`, naming the language the registry lists this process's limiters under (the first
/// name a process gives is kept).
pub(crate) fn publish_as(out: Out<*mut rk_backend>, inner: Backend, language: &str) {
    ratekeeper::set_client_language(language);
    out.write(Box::into_raw(Box::new(rk_backend { inner })));
}

/// \brief Creates an in-process memory backend with default settings (at most 1,000,000 keys).
///
/// State is per process and shared by every limiter built from this backend.
///
/// \param backend_out Receives the new backend; free it with `rk_backend_free`.
/// \return #RK_OK, or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_backend_new_memory(backend_out: *mut *mut rk_backend) -> rk_status {
    ffi_status! {
        let out = Out::new("backend_out", backend_out)?;
        publish(out, Backend::memory());
        Ok(())
    }
}

/// \brief Creates an in-process memory backend holding at most `max_keys` keys.
///
/// When full, expired state is dropped first; if none has expired, calls on new keys fail with
/// #RK_BACKEND_UNAVAILABLE rather than resetting live ones.
///
/// \param max_keys The most keys held at once (at least 1).
/// \param backend_out Receives the new backend; free it with `rk_backend_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_backend_new_memory_with(max_keys: u64, backend_out: *mut *mut rk_backend) -> rk_status {
    ffi_status! {
        let out = Out::new("backend_out", backend_out)?;
        let max_keys = usize::try_from(max_keys)
            .map_err(|_| Error::invalid("max_keys", format!("{max_keys} does not fit this platform's size_t")))?;
        publish(out, Backend::memory_with(MemoryConfig::default().max_keys(max_keys))?);
        Ok(())
    }
}

/// \brief Creates a backend on a standalone Redis server.
///
/// Nothing connects until the first call, so an unreachable server is reported by the calls
/// (#RK_BACKEND_UNAVAILABLE or #RK_TIMEOUT under #RK_FAIL_CLOSED), never here. Every process
/// using the same server and prefix, in any language, shares the same limits.
///
/// \param url `redis://[user:password@]host:port[/db]` or `rediss://...` (TLS).
/// \param prefix The namespace of every key; NULL for the default `"rk"`.
/// \param failure_policy One of ::rk_failure_policy.
/// \param fallback_divisor With #RK_FALLBACK: what to divide limits by (at least 1, e.g. the
///        number of processes sharing them); ignored otherwise.
/// \param deadline_secs Every call returns within this many seconds, answered or not; 0 for the
///        default (0.2 s).
/// \param backend_out Receives the new backend; free it with `rk_backend_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_backend_new_redis(
    url: *const c_char,
    prefix: *const c_char,
    failure_policy: u32,
    fallback_divisor: u32,
    deadline_secs: f64,
    backend_out: *mut *mut rk_backend,
) -> rk_status {
    ffi_status! {
        let out = Out::new("backend_out", backend_out)?;
        let url = arg_str("url", url)?;
        publish(out, redis_backend(RedisConfig::new(url), prefix, failure_policy, fallback_divisor, deadline_secs)?);
        Ok(())
    }
}

/// \brief Creates a backend on a Redis Cluster reached through any of `seeds`.
///
/// The other parameters are those of `rk_backend_new_redis`. MOVED and ASK redirections are
/// followed by the client; every key of one limiter and key shares one hash slot.
///
/// \param seeds An array of `seeds_len` seed node URLs (`redis://host:port`).
/// \param seeds_len The number of seeds (at least 1); `seeds` may be NULL only when it is 0.
/// \param prefix The namespace of every key; NULL for the default `"rk"`.
/// \param failure_policy One of ::rk_failure_policy.
/// \param fallback_divisor With #RK_FALLBACK: what to divide limits by (at least 1).
/// \param deadline_secs Per-call deadline in seconds; 0 for the default (0.2 s).
/// \param backend_out Receives the new backend; free it with `rk_backend_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT.
#[no_mangle]
pub extern "C" fn rk_backend_new_redis_cluster(
    seeds: *const *const c_char,
    seeds_len: usize,
    prefix: *const c_char,
    failure_policy: u32,
    fallback_divisor: u32,
    deadline_secs: f64,
    backend_out: *mut *mut rk_backend,
) -> rk_status {
    ffi_status! {
        let out = Out::new("backend_out", backend_out)?;
        let seeds = arg_slice("seeds", seeds, seeds_len)?;
        if seeds.is_empty() {
            return Err(Error::invalid("seeds", "at least one seed node is required").into());
        }
        let mut urls = Vec::with_capacity(seeds.len());
        for (i, seed) in seeds.iter().enumerate() {
            urls.push(arg_str(&format!("seeds[{i}]"), *seed)?);
        }
        let config = RedisConfig::cluster(urls);
        publish(out, redis_backend(config, prefix, failure_policy, fallback_divisor, deadline_secs)?);
        Ok(())
    }
}

/// \brief Frees a backend. NULL is ignored.
///
/// Limiters built from it stay valid (they hold what they need). A Redis backend first sends
/// this process's pending metric counts and registrations (as `rk_backend_flush` does), so
/// free it before exiting. Call it once per backend, when no other thread is using this handle.
///
/// \param backend A backend from an `rk_backend_new_*` function, or NULL.
#[no_mangle]
pub extern "C" fn rk_backend_free(backend: *mut rk_backend) {
    ffi_boundary! {
        if !backend.is_null() {
            // SAFETY: the caller's contract: made by `publish`, not freed before.
            let backend = unsafe { Box::from_raw(backend) };
            // The last flush of a process that frees its backend before exiting: pending counts
            // and registrations reach Redis even if it lived under a second.
            let _ = backend.inner.flush_blocking();
        }
    }
}
