//! `Backend`: where limiter state lives (memory, Redis, Redis Cluster), and the limiter
//! constructors.

use std::time::Duration;

use napi::{Env, Unknown};
use napi_derive::napi;
use ratekeeper::params::{cost_from_f64, count_from_f64, duration_from_millis, timeout_from_millis};
use ratekeeper::{CalendarPeriod, Error, LimiterSpec, MemoryConfig, RedisConfig, SlidingLimit, TlsConfig, WindowLimit};

use crate::args::{self, count, Js};
use crate::decision::BackendStats;
use crate::error::{core, guard};
use crate::limiter::Limiter;
use crate::options::{self, options, ClockOption, FallbackPolicy, Pem, Policy};
use crate::runtime::CoreResult;

/// Options of `Backend.memory()`.
#[napi(object, object_to_js = false)]
pub struct MemoryOptions {
    /// The most keys held at once (default 1,000,000). When full, expired state is dropped
    /// first and new keys are refused (`ERR_BACKEND_UNAVAILABLE`) rather than resetting live ones.
    pub max_keys: Option<f64>,
    /// Lock shards (a power of two; default: chosen for the machine).
    pub shards: Option<f64>,
    /// A manual clock (tests); default: the system clock.
    #[napi(ts_type = "ManualClock")]
    pub clock: Option<ClockOption>,
}
options!(MemoryOptions { max_keys, shards, clock });

/// PEM material for `rediss://` URLs.
#[napi(object, object_to_js = false)]
pub struct TlsOptions {
    /// The CA certificate(s) that signed the server's certificate (default: the system store).
    #[napi(ts_type = "string | Uint8Array")]
    pub ca: Option<Pem>,
    /// A client certificate for mutual TLS (with `key`).
    #[napi(ts_type = "string | Uint8Array")]
    pub cert: Option<Pem>,
    /// The client certificate's private key.
    #[napi(ts_type = "string | Uint8Array")]
    pub key: Option<Pem>,
}
options!(TlsOptions { ca, cert, key });

/// Options of `Backend.redis()` and `Backend.cluster()`.
#[napi(object, object_to_js = false)]
pub struct RedisOptions {
    /// Namespace of every key (default `rk`): 1 to 64 characters from `[A-Za-z0-9_.-]`.
    pub prefix: Option<String>,
    /// What calls do when Redis cannot answer within `deadlineMs`: `'fail_closed'` (default:
    /// `ERR_BACKEND_UNAVAILABLE` or `ERR_TIMEOUT`), `'fail_open'` (allow, counted in
    /// `stats().failedOpen`), or `{ fallback: n }` (an in-process limiter with 1/n of the limit
    /// takes over, counted in `stats().fellBack`).
    #[napi(ts_type = "'fail_closed' | 'fail_open' | FallbackPolicy")]
    pub failure_policy: Option<Policy>,
    /// Every call settles within this many milliseconds, answered or not (default 200).
    pub deadline_ms: Option<f64>,
    /// Time allowed to establish a connection in the background (default 1000 ms).
    pub connect_timeout_ms: Option<f64>,
    /// Certificates for `rediss://` URLs.
    pub tls: Option<TlsOptions>,
    /// A manual clock (tests and vectors): its time is sent with every call instead of using the
    /// server's `TIME`.
    #[napi(ts_type = "ManualClock")]
    pub clock: Option<ClockOption>,
    /// Remember refusals in this process for every limiter of the backend (default false): a
    /// check of the same key with at least the refused cost is refused from memory until the
    /// refusal's `retryAfterMs` has passed, with no round trip (counted in
    /// `metrics().refusedLocally`). `limiter.withDenyCache` sets it per limiter.
    pub deny_cache: Option<bool>,
    /// The most refusals the deny cache holds (default 10000; at least 1).
    pub deny_cache_max_entries: Option<f64>,
    /// What building a limiter whose spec differs from the one live processes use under its
    /// name does: `'warn'` (default: build it, warn once on stderr naming both specs, count it in
    /// `metrics().specConflicts`, show it in `limiters()`), or `'raise'` (read the registry
    /// first and throw `ERR_INVALID_ARGUMENT` naming `spec`). `setLimit` changes a limit
    /// fleet-wide.
    #[napi(ts_type = "'warn' | 'raise'")]
    pub on_conflict: Option<String>,
    /// How many replicas must acknowledge each call's writes (`WAIT`) before it admits (default
    /// 0: no waiting); too few within `deadlineMs` fail the call as unavailable, and
    /// `failurePolicy` decides (`'fail_open'` then admits).
    pub replica_acks: Option<f64>,
}
options!(RedisOptions {
    prefix,
    failure_policy: FallbackPolicy | String,
    deadline_ms,
    connect_timeout_ms,
    tls: TlsOptions,
    clock,
    deny_cache,
    deny_cache_max_entries,
    on_conflict,
    replica_acks
});

/// Where a Sentinel-managed primary is found (`Backend.sentinel()`; the rest of its options are
/// `RedisOptions`, with `tls` the data nodes' TLS).
#[napi(object, object_to_js = false)]
pub struct SentinelOptions {
    /// The name the sentinels know the primary by (their `sentinel monitor` line).
    pub service: Option<String>,
    /// The data nodes' user (ACL).
    pub username: Option<String>,
    /// The data nodes' password.
    pub password: Option<String>,
    /// The data nodes' database number (default 0).
    pub db: Option<f64>,
    /// The sentinels' user (their ACL is separate from the data nodes').
    pub sentinel_username: Option<String>,
    /// The sentinels' password.
    pub sentinel_password: Option<String>,
    /// The sentinels speak TLS, trusting these certificates (separate from the data nodes').
    pub sentinel_tls: Option<TlsOptions>,
}
options!(SentinelOptions {
    service,
    username,
    password,
    db,
    sentinel_username,
    sentinel_password,
    sentinel_tls: TlsOptions
});

/// Options shared by every limiter constructor.
#[napi(object, object_to_js = false)]
pub struct LimiterOptions {
    /// How long `acquire` and `withinLimit` wait by default (default 5000 ms; 0: never wait).
    pub wait_timeout_ms: Option<f64>,
    /// Shadow mode: a call the limit would refuse is admitted with `shadowRefused: true`,
    /// consuming nothing (default false). See `limiter.withShadow`.
    pub shadow: Option<bool>,
}
options!(LimiterOptions { wait_timeout_ms, shadow });

/// Options of `backend.concurrent()`.
#[napi(object, object_to_js = false)]
#[derive(Default)]
pub struct ConcurrentOptions {
    /// A lease older than this may be reclaimed by a caller that needs its slot (default 30000).
    pub lock_timeout_ms: Option<f64>,
    /// How long `acquire` and `withinLimit` wait for a slot by default (default 5000 ms).
    pub wait_timeout_ms: Option<f64>,
    /// While Redis is unreachable a concurrent limiter fails closed, whatever the backend's
    /// failure policy, unless this is true: then `fail_open` grants leases that guard nothing
    /// (fencing token 0) and `fallback` an in-process limiter (a limit per process, its fencing
    /// tokens increasing within the process only). Default false.
    pub allow_fallback: Option<bool>,
    /// Shadow mode: a call the limit would refuse is admitted with `shadowRefused: true`,
    /// consuming nothing (default false). See `limiter.withShadow`.
    pub shadow: Option<bool>,
}
options!(ConcurrentOptions { lock_timeout_ms, wait_timeout_ms, allow_fallback, shadow });

/// Options of `backend.partitions()`.
#[napi(object, object_to_js = false)]
#[derive(Default)]
pub struct PartitionsOptions {
    /// How long a lease lasts unless renewed: a dead process's partitions return after it
    /// (default 15000).
    pub lease_ttl_ms: Option<f64>,
    /// Partitions set aside for the priority class (default 0).
    pub reserved: Option<f64>,
    /// Whether this limiter belongs to the priority class: it leases only the reserved
    /// partitions, the others only the rest (default false).
    pub priority: Option<bool>,
    /// How long `acquire` and `withinLimit` wait by default (default 5000 ms; 0: never wait).
    pub wait_timeout_ms: Option<f64>,
    /// Shadow mode: a call the limit would refuse is admitted with `shadowRefused: true`,
    /// consuming nothing (default false). See `limiter.withShadow`.
    pub shadow: Option<bool>,
}
options!(PartitionsOptions { lease_ttl_ms, reserved, priority, wait_timeout_ms, shadow });

/// Options of `backend.calendar()`.
#[napi(object, object_to_js = false)]
#[derive(Default)]
pub struct CalendarOptions {
    /// The IANA time zone the calendar follows, e.g. `"Europe/Berlin"` (default `"UTC"`).
    pub tz: Option<String>,
    /// Monthly periods start on this day of the month (1-31, clamped to the month's last day;
    /// default 1).
    pub anchor: Option<f64>,
    /// How long `acquire` and `withinLimit` wait by default (default 5000 ms; 0: never wait).
    pub wait_timeout_ms: Option<f64>,
    /// Shadow mode: a call the limit would refuse is admitted with `shadowRefused: true`,
    /// consuming nothing (default false). See `limiter.withShadow`.
    pub shadow: Option<bool>,
}
options!(CalendarOptions { tz, anchor, wait_timeout_ms, shadow });

/// Options of `backend.leased()`.
#[napi(object, object_to_js = false)]
#[derive(Default)]
pub struct LeasedOptions {
    /// The most tokens one lease takes from Redis (default capacity / 16, at least 1).
    pub chunk: Option<f64>,
    /// How long this process may spend a lease's tokens before they lapse (default 1000).
    pub lease_ttl_ms: Option<f64>,
    /// How long `acquire` and `withinLimit` wait by default (default 5000 ms; 0: never wait).
    pub wait_timeout_ms: Option<f64>,
    /// Shadow mode: a call the limit would refuse is admitted with `shadowRefused: true`,
    /// consuming nothing (default false). See `limiter.withShadow`.
    pub shadow: Option<bool>,
}
options!(LeasedOptions { chunk, lease_ttl_ms, wait_timeout_ms, shadow });

/// One window of `backend.windows()`: at most `limit` admissions in any span of `intervalMs`.
#[napi(object, object_to_js = false)]
pub struct WindowLimitOptions {
    /// Admissions allowed per span.
    pub limit: f64,
    /// The span, in milliseconds.
    pub interval_ms: f64,
}
options!(WindowLimitOptions { limit, interval_ms });

/// One limit of `backend.slidingWindow()` (or the tuple `[durationMs, limit, precisionMs?]`).
#[napi(object, object_to_js = false)]
pub struct SlidingLimitOptions {
    /// The span the limit covers, in milliseconds.
    pub duration_ms: f64,
    /// Units allowed per span.
    pub limit: f64,
    /// Sub-bucket size in milliseconds; absent (or ≥ `durationMs`): a fixed window aligned to
    /// the epoch.
    pub precision_ms: Option<f64>,
}
options!(SlidingLimitOptions { duration_ms, limit, precision_ms });

/// Where limiter state lives; every limiter built from one backend shares it, and every backend
/// for the same Redis URL in this process shares one connection set. `new Backend()` is an
/// in-process memory backend.
///
/// The native side of index.js's `Backend`, which users hold (its builders wrap each
/// `NativeLimiter` in a `Limiter`).
#[napi(js_name = "NativeBackend")]
pub struct Backend {
    pub(crate) inner: ratekeeper::Backend,
}

fn memory_backend(options: Option<MemoryOptions>) -> CoreResult<ratekeeper::Backend> {
    let mut config = MemoryConfig::default();
    let Some(o) = options else { return ratekeeper::Backend::memory_with(config) };
    if let Some(n) = o.max_keys {
        config = config.max_keys(count_from_f64("max_keys", n)? as usize);
    }
    if let Some(n) = o.shards {
        config = config.shards(count_from_f64("shards", n)? as usize);
    }
    if let Some(ClockOption(clock)) = o.clock {
        config = config.clock(clock);
    }
    ratekeeper::Backend::memory_with(config)
}

/// Adds, once per Node environment, a cleanup hook that flushes every Redis backend's pending
/// counts and registrations as the environment exits (after `process.on('exit')` listeners),
/// so that a process living under a second still counts.
fn flush_at_exit(env: &Env) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        let _ = env.add_env_cleanup_hook((), |()| {
            // No panic crosses into Node, even at exit.
            let _ = std::panic::catch_unwind(ratekeeper::Backend::flush_every_backend_at_exit);
        });
    });
}

fn redis_backend(mut config: RedisConfig, options: Option<RedisOptions>) -> CoreResult<ratekeeper::Backend> {
    let Some(o) = options else { return ratekeeper::Backend::redis_with(config) };
    if let Some(prefix) = o.prefix {
        config = config.prefix(prefix);
    }
    if let Some(Policy(policy)) = o.failure_policy {
        config = config.failure_policy(policy);
    }
    if let Some(ms) = o.deadline_ms {
        config = config.deadline(duration_from_millis("deadline", ms)?);
    }
    if let Some(ms) = o.connect_timeout_ms {
        config = config.connect_timeout(duration_from_millis("connect_timeout", ms)?);
    }
    if let Some(tls) = o.tls {
        if let Some(sentinel) = &mut config.sentinel {
            sentinel.tls = true;
        }
        config = config.tls(tls_config(tls, "tls")?);
    }
    if let Some(ClockOption(clock)) = o.clock {
        config = config.clock(clock);
    }
    if let Some(on) = o.deny_cache {
        config = config.deny_cache(on);
    }
    if let Some(on_conflict) = o.on_conflict {
        config = config.on_conflict(ratekeeper::OnConflict::from_name("on_conflict", &on_conflict)?);
    }
    if let Some(n) = o.deny_cache_max_entries {
        config = config.deny_cache_max_entries(
            usize::try_from(count_from_f64("deny_cache_max_entries", n)?).unwrap_or(usize::MAX),
        );
    }
    if let Some(n) = o.replica_acks {
        let n = cost_from_f64("replica_acks", n)?;
        let n =
            u32::try_from(n).map_err(|_| Error::invalid("replica_acks", format!("must be at most {}", u32::MAX)))?;
        config = config.replica_acks(n);
    }
    ratekeeper::Backend::redis_with(config)
}

/// The TLS material of `tls`, its parts named under `parameter` (`tls.key`).
fn tls_config(tls: TlsOptions, parameter: &str) -> CoreResult<TlsConfig> {
    let mut t = TlsConfig::default();
    t.ca_cert_pem = tls.ca.map(|Pem(ca)| ca);
    match (tls.cert, tls.key) {
        (Some(Pem(cert)), Some(Pem(key))) => t.client_cert_and_key_pem = Some((cert, key)),
        (None, None) => {}
        (Some(_), None) => return Err(Error::invalid_field(format!("{parameter}.key"), "is required with `cert`")),
        (None, Some(_)) => return Err(Error::invalid_field(format!("{parameter}.cert"), "is required with `key`")),
    }
    Ok(t)
}

/// A required array of strings (`seeds`, `sentinels`); an item of the wrong type is named by its
/// index, as the core names one it refuses.
fn strings(value: &Option<Unknown<'_>>, parameter: &'static str) -> CoreResult<Vec<String>> {
    let list = args::required(Js::opt(value), parameter)?.array(parameter)?;
    let item = |(i, s): (usize, Js)| {
        s.string(parameter).map_err(|e| match e {
            Error::InvalidArgument { message, .. } => Error::invalid_field(format!("{parameter}[{i}]"), message),
            other => other,
        })
    };
    list.into_iter().enumerate().map(item).collect()
}

/// The configuration of a Sentinel-managed primary behind `sentinels` from `Backend.sentinel()`'s
/// options.
fn sentinel_config(sentinels: Vec<String>, o: Option<SentinelOptions>) -> CoreResult<RedisConfig> {
    let o = o.ok_or_else(|| Error::invalid("service", "is required (the name the sentinels monitor)"))?;
    let service = o.service.ok_or_else(|| Error::invalid("service", "is required (the name the sentinels monitor)"))?;
    let mut sentinel = ratekeeper::SentinelConfig::new(sentinels.clone(), service.clone());
    sentinel.username = o.username;
    sentinel.password = o.password;
    if let Some(db) = o.db {
        if !(db.is_finite() && db.fract() == 0.0 && db >= 0.0 && db <= i32::MAX as f64) {
            return Err(Error::invalid("db", format!("must be a whole number from 0, got {db}")));
        }
        sentinel.db = db as i64;
    }
    sentinel.sentinel_username = o.sentinel_username;
    sentinel.sentinel_password = o.sentinel_password;
    sentinel.sentinel_tls = o.sentinel_tls.map(|t| tls_config(t, "sentinelTls")).transpose()?;
    let mut config = RedisConfig::sentinel(sentinels, service);
    config.sentinel = Some(sentinel);
    Ok(config)
}

/// The count and interval of `bucket` / `window`: `(name, limit, interval, options?)` with the
/// interval a string with its unit, or `(name, rate, options?)` with a rate string such as
/// `'5/minute'` (then the third argument is the options). Returns the options argument too.
fn count_and_interval<'a, 'e>(
    limit: &'a Option<Unknown<'e>>,
    interval: &'a Option<Unknown<'e>>,
    options: &'a Option<Unknown<'e>>,
) -> CoreResult<(u64, Duration, &'a Option<Unknown<'e>>)> {
    let first = args::required(Js::opt(limit), "limit")?;
    let then = Js::opt(interval);
    // `(name, '5', '1s')`: a count written as text, not a rate (a rate takes no interval).
    let rate_form = then.is_none_or(|v| v.value_type() == napi::ValueType::Object);
    if first.value_type() == napi::ValueType::String && rate_form {
        if options.is_some() {
            return Err(Error::invalid("options", "comes third after a rate string: (name, '5/minute', options)"));
        }
        let rate = ratekeeper::parse_rate("rate", &first.string("rate")?)?;
        return Ok((rate.limit, rate.interval, interval));
    }
    Ok((count(Some(first), "limit")?, args::duration_text(Js::opt(interval), "interval")?, options))
}

fn name(value: &Option<Unknown<'_>>) -> CoreResult<String> {
    args::required(Js::opt(value), "name")?.string("name")
}

/// Applies the `waitTimeoutMs` and `shadow` options.
fn with_wait_timeout(
    limiter: ratekeeper::Limiter,
    wait_timeout_ms: Option<f64>,
    shadow: Option<bool>,
    local: bool,
) -> CoreResult<Limiter> {
    let limiter = match wait_timeout_ms {
        Some(ms) => limiter.with_wait_timeout(timeout_from_millis("wait_timeout", ms)?)?,
        None => limiter,
    };
    let limiter = match shadow {
        Some(shadow) => limiter.with_shadow(shadow)?,
        None => limiter,
    };
    Ok(Limiter::new(limiter, local))
}

/// Applies a limiter constructor's `LimiterOptions`.
fn with_options(limiter: ratekeeper::Limiter, options: &Option<Unknown<'_>>, local: bool) -> CoreResult<Limiter> {
    let options = options::optional::<LimiterOptions>(options)?;
    let (wait, shadow) = options.map_or((None, None), |o| (o.wait_timeout_ms, o.shadow));
    with_wait_timeout(limiter, wait, shadow, local)
}

impl Backend {
    /// Whether the backend is in-process (its calls never wait on I/O).
    pub fn is_local(&self) -> bool {
        self.inner.is_memory()
    }
}

#[napi]
impl Backend {
    /// An in-process memory backend with default settings (the same as `Backend.memory()`).
    #[napi(constructor)]
    pub fn new(env: Env) -> napi::Result<Self> {
        guard(&env, || Ok(Backend { inner: core(&env, memory_backend(None))? }))
    }

    /// An in-process memory backend: per process, thread-safe, bounded.
    #[napi(factory, ts_args_type = "options?: MemoryOptions")]
    pub fn memory(env: Env, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || Ok(Backend { inner: core(&env, options::optional(&options).and_then(memory_backend))? }))
    }

    /// A standalone Redis server: `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS).
    /// Nothing connects until the first call.
    #[napi(factory, ts_args_type = "url: string, options?: RedisOptions")]
    pub fn redis(env: Env, url: Option<Unknown<'_>>, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || {
            let result = args::required(Js::opt(&url), "url")
                .and_then(|u| u.string("url"))
                .and_then(|url| redis_backend(RedisConfig::new(url), options::optional(&options)?));
            flush_at_exit(&env);
            Ok(Backend { inner: core(&env, result)? })
        })
    }

    /// A Redis Cluster reached through any of `seeds` (`redis://host:port` URLs).
    #[napi(factory, ts_args_type = "seeds: string[], options?: RedisOptions")]
    pub fn cluster(env: Env, seeds: Option<Unknown<'_>>, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || {
            let result = strings(&seeds, "seeds")
                .and_then(|seeds| redis_backend(RedisConfig::cluster(seeds), options::optional(&options)?));
            flush_at_exit(&env);
            Ok(Backend { inner: core(&env, result)? })
        })
    }

    /// A Sentinel-managed primary, found through any of `sentinels` (`'host:port'`): every connection
    /// asks the sentinels where the primary is and confirms its role first, so a failover is
    /// followed and no call goes to a replica. `options` are `Backend.redis()`'s (`tls`: the data
    /// nodes speak TLS). The URL form `redis+sentinel://[user:password@]host:port[,…]/service[/db]`
    /// works wherever a Redis URL does.
    #[napi(factory, ts_args_type = "sentinels: string[], sentinel: SentinelOptions, options?: RedisOptions")]
    pub fn sentinel(
        env: Env,
        sentinels: Option<Unknown<'_>>,
        sentinel: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Self> {
        guard(&env, || {
            let result = strings(&sentinels, "sentinels")
                .and_then(|sentinels| sentinel_config(sentinels, options::optional::<SentinelOptions>(&sentinel)?))
                .and_then(|config| redis_backend(config, options::optional(&options)?));
            flush_at_exit(&env);
            Ok(Backend { inner: core(&env, result)? })
        })
    }

    /// Keys held by a memory backend (expired ones included until swept); `null` for Redis.
    #[napi(getter)]
    pub fn memory_keys(&self) -> Option<f64> {
        self.inner.memory_len().map(|n| n as f64)
    }

    /// What the failure policy has done so far (all 0 for memory backends).
    #[napi]
    pub fn stats(&self) -> BackendStats {
        self.inner.stats().into()
    }

    /// At most `limit` holders at once. `acquire` (or `check`) returns a lease to `release`; a
    /// lease older than `lockTimeoutMs` may be reclaimed by a caller that needs its slot.
    /// `limit = 1` is a distributed mutex.
    #[napi(ts_args_type = "name: string, limit: number, options?: ConcurrentOptions")]
    pub fn concurrent(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        limit: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let o = options::optional::<ConcurrentOptions>(&options)?.unwrap_or_default();
                let name = self::name(&name)?;
                let limit = count(Js::opt(&limit), "limit")?;
                let lock = o.lock_timeout_ms.map(|ms| duration_from_millis("lock_timeout", ms)).transpose()?;
                let limiter = self
                    .inner
                    .concurrent(&name, limit, lock.unwrap_or(ratekeeper::DEFAULT_LOCK_TIMEOUT))?
                    .with_allow_fallback(o.allow_fallback.unwrap_or(false))?;
                with_wait_timeout(limiter, o.wait_timeout_ms, o.shadow, self.is_local())
            };
            core(&env, build())
        })
    }

    /// `limit` per fixed window of `interval` (a string with its unit: `'1m'`, `'60s'`,
    /// `'minute'`), windows aligned to multiples of the interval since the epoch; or a rate
    /// string in place of both: `bucket('api', '100/minute')`.
    #[napi(
        ts_args_type = "name: string, limit: number | string, interval?: string | LimiterOptions, options?: LimiterOptions"
    )]
    pub fn bucket(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        limit: Option<Unknown<'_>>,
        interval: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let (limit, interval, options) = count_and_interval(&limit, &interval, &options)?;
                let spec = LimiterSpec::Bucket { limit, interval };
                with_options(self.inner.limiter(&name, spec)?, options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Exact sliding window: never more than `limit` admissions in any span of `interval` (a
    /// string with its unit); or a rate string in place of both: `window('api', '5/minute')`.
    #[napi(
        ts_args_type = "name: string, limit: number | string, interval?: string | LimiterOptions, options?: LimiterOptions"
    )]
    pub fn window(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        limit: Option<Unknown<'_>>,
        interval: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let (limit, interval, options) = count_and_interval(&limit, &interval, &options)?;
                let window = WindowLimit { limit, interval };
                with_options(self.inner.windows(&name, &[window])?, options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Several exact sliding windows checked and recorded together (e.g. 25 per 5 s AND 300 per
    /// 60 s): `[{ limit, intervalMs }, …]` or a rate string `'25/5s; 300/minute'`; decisions
    /// carry each window's state in `limits`.
    #[napi(ts_args_type = "name: string, windows: WindowLimitOptions[] | string, options?: LimiterOptions")]
    pub fn windows(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        windows: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let given = args::required(Js::opt(&windows), "windows")?;
                let mut parsed = Vec::new();
                if given.value_type() == napi::ValueType::String {
                    for rate in ratekeeper::parse_rates("rate", &given.string("windows")?)? {
                        parsed.push(WindowLimit { limit: rate.limit, interval: rate.interval });
                    }
                }
                for w in if parsed.is_empty() { given.array("windows")? } else { Vec::new() } {
                    let w: WindowLimitOptions = options::read(w, "windows")?;
                    parsed.push(WindowLimit {
                        limit: count_from_f64("limit", w.limit)?,
                        interval: duration_from_millis("intervalMs", w.interval_ms)?,
                    });
                }
                with_options(self.inner.windows(&name, &parsed)?, &options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Several limits in one atomic check over sub-buckets of `precisionMs` (Carlson's sliding
    /// window): `[{ durationMs, limit, precisionMs? }, …]` or `[[duration, limit, precision?], …]`
    /// with the tuple's durations strings with units (`['1h', 1000, '1m']`).
    #[napi(
        ts_args_type = "name: string, limits: Array<SlidingLimitOptions | [string, number] | [string, number, string]>, options?: LimiterOptions"
    )]
    pub fn sliding_window(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        limits: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let list = args::required(Js::opt(&limits), "limits")?.array("limits")?;
                let mut parsed = Vec::with_capacity(list.len());
                for l in list {
                    let (duration, limit, precision) = match l.array("limits") {
                        Ok(tuple) if (2..=3).contains(&tuple.len()) => {
                            (Some(tuple[0]), Some(tuple[1]), tuple.get(2).copied())
                        }
                        Ok(_) => return Err(Error::invalid("limits", "each limit is [duration, limit, precision?]")),
                        Err(_) => {
                            let o: SlidingLimitOptions = options::read(l, "limits")?;
                            parsed.push(SlidingLimit {
                                duration: duration_from_millis("durationMs", o.duration_ms)?,
                                limit: count_from_f64("limit", o.limit)?,
                                precision: o
                                    .precision_ms
                                    .map(|ms| duration_from_millis("precisionMs", ms))
                                    .transpose()?,
                            });
                            continue;
                        }
                    };
                    parsed.push(SlidingLimit {
                        duration: args::duration_text(duration, "duration")?,
                        limit: count(limit, "limit")?,
                        precision: args::opt_duration_text(precision, "precision")?,
                    });
                }
                with_options(self.inner.sliding_window(&name, &parsed)?, &options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Refills `rate` tokens per second up to `capacity`; a call asks for `cost` tokens.
    #[napi(ts_args_type = "name: string, rate: number, capacity: number, options?: LimiterOptions")]
    pub fn token_bucket(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        rate: Option<Unknown<'_>>,
        capacity: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let spec = LimiterSpec::TokenBucket {
                    rate: args::required(Js::opt(&rate), "rate")?.number("rate")?,
                    capacity: count(Js::opt(&capacity), "capacity")?,
                };
                with_options(self.inner.limiter(&name, spec)?, &options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Leased partitions (Azure's rate limiting pattern): `totalRate` units per second split into
    /// `partitions` equal partitions. On Redis each process leases a fair share of them for
    /// `leaseTtlMs` (renewed while it calls) and `check`/`acquire` pace it to the rate it holds
    /// (20 calls per 200 ms at 100/s, not 100 at once); a dead process's partitions return after
    /// `leaseTtlMs`, and `close()` gives them back at once. On memory the process holds every
    /// partition of its class.
    #[napi(ts_args_type = "name: string, totalRate: number, partitions: number, options?: PartitionsOptions")]
    pub fn partitions(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        total_rate: Option<Unknown<'_>>,
        partitions: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let o = options::optional::<PartitionsOptions>(&options)?.unwrap_or_default();
                let spec = LimiterSpec::Partitions {
                    total_rate: args::required(Js::opt(&total_rate), "total_rate")?.number("total_rate")?,
                    partitions: count(Js::opt(&partitions), "partitions")?,
                    lease_ttl: o
                        .lease_ttl_ms
                        .map(|ms| duration_from_millis("lease_ttl", ms))
                        .transpose()?
                        .unwrap_or(ratekeeper::DEFAULT_PARTITIONS_LEASE_TTL),
                    reserved: o.reserved.map(|r| cost_from_f64("reserved", r)).transpose()?.unwrap_or(0),
                    priority: o.priority.unwrap_or(false),
                };
                with_wait_timeout(self.inner.limiter(&name, spec)?, o.wait_timeout_ms, o.shadow, self.is_local())
            };
            core(&env, build())
        })
    }

    /// A token bucket (`rate` per second up to `capacity`) shared by the fleet, whose tokens
    /// this process takes from Redis in leases of up to `chunk` and spends in-process; unspent
    /// tokens go back on `close()` or at the next lease, or lapse `leaseTtlMs` after they were
    /// taken. The fleet admits at most capacity + rate × (span + lease_ttl) over any span; leasing ahead may under-use
    /// it. On the memory backend: the token bucket.
    #[napi(ts_args_type = "name: string, rate: number, capacity: number, options?: LeasedOptions")]
    pub fn leased(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        rate: Option<Unknown<'_>>,
        capacity: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let o = options::optional::<LeasedOptions>(&options)?.unwrap_or_default();
                let name = self::name(&name)?;
                let rate = args::required(Js::opt(&rate), "rate")?.number("rate")?;
                let capacity = count(Js::opt(&capacity), "capacity")?;
                let chunk = o.chunk.map(|c| count_from_f64("chunk", c)).transpose()?;
                let ttl = o.lease_ttl_ms.map(|ms| duration_from_millis("lease_ttl", ms)).transpose()?;
                let limiter = self.inner.leased(
                    &name,
                    rate,
                    capacity,
                    chunk,
                    ttl.unwrap_or(ratekeeper::DEFAULT_LEASED_LEASE_TTL),
                )?;
                with_wait_timeout(limiter, o.wait_timeout_ms, o.shadow, self.is_local())
            };
            core(&env, build())
        })
    }

    /// A burst of `size`, then one call per `drain / size`; full again after `drain` idle
    /// (`drain` a string with its unit: `'1m'`).
    #[napi(ts_args_type = "name: string, size: number, drain: string, options?: LimiterOptions")]
    pub fn leaky(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        size: Option<Unknown<'_>>,
        drain: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let spec = LimiterSpec::Leaky {
                    size: count(Js::opt(&size), "size")?,
                    drain: args::duration_text(Js::opt(&drain), "drain")?,
                };
                with_options(self.inner.limiter(&name, spec)?, &options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// A leaky bucket of `capacity` points refilled in `refill` (a string with its unit): a call
    /// gives an estimate, and `pointsUsed` (or the permit of `withinLimit`) charges or refunds the
    /// difference.
    #[napi(ts_args_type = "name: string, capacity: number, refill: string, options?: LimiterOptions")]
    pub fn points(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        capacity: Option<Unknown<'_>>,
        refill: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let spec = LimiterSpec::Points {
                    capacity: count(Js::opt(&capacity), "capacity")?,
                    refill: args::duration_text(Js::opt(&refill), "refill")?,
                };
                with_options(self.inner.limiter(&name, spec)?, &options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// `limit` per calendar `period` (`'day'`, `'week'` from Monday, `'month'`, `'year'`) in the
    /// IANA time zone `tz` (default UTC); months start on day `anchor`.
    #[napi(
        ts_args_type = "name: string, limit: number, period: 'day' | 'week' | 'month' | 'year', options?: CalendarOptions"
    )]
    pub fn calendar(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        limit: Option<Unknown<'_>>,
        period: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let o = options::optional::<CalendarOptions>(&options)?.unwrap_or_default();
                let name = self::name(&name)?;
                let limit = count(Js::opt(&limit), "limit")?;
                let period = CalendarPeriod::parse(&args::required(Js::opt(&period), "period")?.string("period")?)?;
                let anchor = o.anchor.map(|a| count_from_f64("anchor", a).map(|a| a.min(255) as u8)).transpose()?;
                let limiter = self.inner.calendar(&name, limit, period, o.tz.as_deref().unwrap_or("UTC"), anchor)?;
                with_wait_timeout(limiter, o.wait_timeout_ms, o.shadow, self.is_local())
            };
            core(&env, build())
        })
    }

    /// A limiter built from its spec as canonical-or-not JSON text (durations in seconds, as in
    /// every language). `backend.limiter(name, spec)` takes an object or this text.
    #[napi(ts_args_type = "name: string, specJson: string")]
    pub fn limiter_from_json(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        spec_json: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let json = args::required(Js::opt(&spec_json), "spec")?.string("spec")?;
                Ok(Limiter::new(self.inner.limiter_from_json(&name, &json)?, self.is_local()))
            };
            core(&env, build())
        })
    }

    /// A limiter that always allows and touches no backend (admins, tests); `limit` and
    /// `remaining` are 2^53. Without a name it is `Limiter.unlimited()`.
    #[napi(ts_args_type = "name?: string")]
    pub fn unlimited(&self, env: Env, name: Option<Unknown<'_>>) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || match name.as_ref() {
                None => Ok(Limiter::new(ratekeeper::Limiter::unlimited(), true)),
                Some(_) => Ok(Limiter::new(self.inner.limiter(&self::name(&name)?, LimiterSpec::Unlimited)?, true)),
            };
            core(&env, build())
        })
    }
}
