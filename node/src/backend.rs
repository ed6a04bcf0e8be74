//! `Backend`: where limiter state lives (memory, Redis, Redis Cluster), and the limiter
//! constructors.

use std::sync::Arc;
use std::time::Duration;

use napi::{Env, Unknown};
use napi_derive::napi;
use ratekeeper::params::{count_from_f64, interval_from_name};
use ratekeeper::{
    CalendarPeriod, Error, FailurePolicy, LimiterSpec, MemoryConfig, RedisConfig, SlidingLimit, TlsConfig, WindowLimit,
};

use crate::args::{self, count, millis, opt_millis, opt_timeout, Js};
use crate::clock::ManualClock;
use crate::decision::BackendStats;
use crate::error::{core, guard};
use crate::limiter::Limiter;
use crate::runtime::CoreResult;

/// Options of `Backend.memory()`.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
pub struct MemoryOptions {
    /// The most keys held at once (default 1,000,000). When full, expired state is dropped
    /// first and new keys are refused (`ERR_BACKEND_UNAVAILABLE`) rather than resetting live ones.
    pub max_keys: Option<f64>,
    /// Lock shards (a power of two; default: chosen for the machine).
    pub shards: Option<f64>,
    /// A manual clock (tests); default: the system clock.
    #[napi(ts_type = "ManualClock")]
    pub clock: Option<()>,
}

/// PEM material for `rediss://` URLs.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
pub struct TlsOptions {
    /// The CA certificate(s) that signed the server's certificate (default: the system store).
    #[napi(ts_type = "string | Uint8Array")]
    pub ca: Option<()>,
    /// A client certificate for mutual TLS (with `key`).
    #[napi(ts_type = "string | Uint8Array")]
    pub cert: Option<()>,
    /// The client certificate's private key.
    #[napi(ts_type = "string | Uint8Array")]
    pub key: Option<()>,
}

/// Options of `Backend.redis()` and `Backend.cluster()`.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
pub struct RedisOptions {
    /// Namespace of every key (default `rk`): 1 to 64 characters from `[A-Za-z0-9_.-]`.
    pub prefix: Option<String>,
    /// What calls do when Redis cannot answer within `deadlineMs`: `'fail_closed'` (default:
    /// `ERR_BACKEND_UNAVAILABLE` or `ERR_TIMEOUT`), `'fail_open'` (allow, counted in
    /// `stats().failedOpen`), or `{ fallback: n }` (an in-process limiter with 1/n of the limit
    /// takes over, counted in `stats().fellBack`).
    #[napi(ts_type = "'fail_closed' | 'fail_open' | { fallback: number }")]
    pub failure_policy: Option<()>,
    /// Every call settles within this many milliseconds, answered or not (default 200).
    pub deadline_ms: Option<f64>,
    /// Time allowed to establish a connection in the background (default 1000 ms).
    pub connect_timeout_ms: Option<f64>,
    /// Certificates for `rediss://` URLs.
    pub tls: Option<TlsOptions>,
    /// A manual clock (tests and vectors): its time is sent with every call instead of using the
    /// server's `TIME`.
    #[napi(ts_type = "ManualClock")]
    pub clock: Option<()>,
}

/// Options shared by every limiter constructor.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
pub struct LimiterOptions {
    /// How long `acquire` and `withinLimit` wait by default (default 5000 ms; 0: never wait).
    pub wait_timeout_ms: Option<f64>,
}

/// Options of `backend.concurrent()`.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
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
}

/// Options of `backend.calendar()`.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
pub struct CalendarOptions {
    /// The IANA time zone the calendar follows, e.g. `"Europe/Berlin"` (default `"UTC"`).
    pub tz: Option<String>,
    /// Monthly periods start on this day of the month (1-31, clamped to the month's last day;
    /// default 1).
    pub anchor: Option<f64>,
    /// How long `acquire` and `withinLimit` wait by default (default 5000 ms; 0: never wait).
    pub wait_timeout_ms: Option<f64>,
}

/// One window of `backend.windows()`: at most `limit` admissions in any span of `intervalMs`.
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
pub struct WindowLimitOptions {
    /// Admissions allowed per span.
    pub limit: f64,
    /// The span, in milliseconds.
    pub interval_ms: f64,
}

/// One limit of `backend.slidingWindow()` (or the tuple `[durationMs, limit, precisionMs?]`).
#[napi(object, object_from_js = false, object_to_js = false)]
#[allow(dead_code)] // only its TypeScript declaration is used
pub struct SlidingLimitOptions {
    /// The span the limit covers, in milliseconds.
    pub duration_ms: f64,
    /// Units allowed per span.
    pub limit: f64,
    /// Sub-bucket size in milliseconds; absent (or ≥ `durationMs`): a fixed window aligned to
    /// the epoch.
    pub precision_ms: Option<f64>,
}

/// Where limiter state lives; every limiter built from one backend shares it, and every backend
/// for the same Redis URL in this process shares one connection set. `new Backend()` is an
/// in-process memory backend.
#[napi]
pub struct Backend {
    pub(crate) inner: ratekeeper::Backend,
}

fn manual_clock(options: Option<Js>) -> CoreResult<Option<Arc<ratekeeper::ManualClock>>> {
    match options.and_then(|o| o.get(c"clock")) {
        None => Ok(None),
        Some(v) => Ok(Some(v.instance::<ManualClock>("clock", "ManualClock")?.inner.clone())),
    }
}

fn memory_backend(options: Option<Js>) -> CoreResult<ratekeeper::Backend> {
    let mut config = MemoryConfig::default();
    if let Some(o) = options {
        if let Some(v) = o.get(c"maxKeys") {
            config = config.max_keys(count_from_f64("max_keys", v.number("max_keys")?)? as usize);
        }
        if let Some(v) = o.get(c"shards") {
            config = config.shards(count_from_f64("shards", v.number("shards")?)? as usize);
        }
    }
    if let Some(clock) = manual_clock(options)? {
        config = config.clock(clock);
    }
    ratekeeper::Backend::memory_with(config)
}

fn redis_backend(mut config: RedisConfig, options: Option<Js>) -> CoreResult<ratekeeper::Backend> {
    let Some(o) = options else { return ratekeeper::Backend::redis_with(config) };
    if let Some(v) = o.get(c"prefix") {
        config = config.prefix(v.string("prefix")?);
    }
    if let Some(v) = o.get(c"failurePolicy") {
        let policy = if let Ok(name) = v.string("failure_policy") {
            match name.as_str() {
                "fail_closed" => FailurePolicy::FailClosed,
                "fail_open" => FailurePolicy::FailOpen,
                other => {
                    return Err(Error::invalid(
                        "failurePolicy",
                        format!("must be 'fail_closed', 'fail_open' or {{ fallback: n }}, got {other:?}"),
                    ))
                }
            }
        } else {
            let divisor = v.object("failurePolicy")?.get(c"fallback");
            let divisor = args::required(divisor, "divisor")?.number("divisor")?;
            // The core checks the divisor (at least 1); this only makes it a whole u32.
            let divisor = if divisor.is_finite() && divisor.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&divisor)
            {
                divisor as u32
            } else {
                return Err(Error::invalid("divisor", format!("must be a whole number of at least 1, got {divisor}")));
            };
            FailurePolicy::Fallback { divisor }
        };
        config = config.failure_policy(policy);
    }
    if let Some(d) = opt_millis(o.get(c"deadlineMs"), "deadline")? {
        config = config.deadline(d);
    }
    if let Some(d) = opt_millis(o.get(c"connectTimeoutMs"), "connect_timeout")? {
        config = config.connect_timeout(d);
    }
    if let Some(tls) = o.get(c"tls") {
        let tls = tls.object("tls")?;
        let mut t = TlsConfig::default();
        t.ca_cert_pem = tls.get(c"ca").map(|v| v.bytes("tls")).transpose()?;
        match (tls.get(c"cert"), tls.get(c"key")) {
            (Some(cert), Some(key)) => t.client_cert_and_key_pem = Some((cert.bytes("tls")?, key.bytes("tls")?)),
            (None, None) => {}
            _ => return Err(Error::invalid("tls", "`cert` and `key` go together")),
        }
        config = config.tls(t);
    }
    if let Some(clock) = manual_clock(options)? {
        config = config.clock(clock);
    }
    ratekeeper::Backend::redis_with(config)
}

/// A named interval (`'second'`, `'minute'`, `'hour'`, `'day'`) or milliseconds.
fn interval(value: Option<Js>) -> CoreResult<Duration> {
    let v = args::required(value, "interval")?;
    match v.string("interval") {
        // The core's message offers "a number of seconds" (Python's and C's unit); here a
        // number is milliseconds.
        Ok(name) => interval_from_name("interval", &name).map_err(|_| {
            Error::invalid(
                "interval",
                format!("must be 'second', 'minute', 'hour', 'day' or a number of milliseconds, got {name:?}"),
            )
        }),
        Err(_) => millis(Some(v), "interval"),
    }
}

fn name(value: &Option<Unknown<'_>>) -> CoreResult<String> {
    args::required(Js::opt(value), "name")?.string("name")
}

/// Applies the `waitTimeoutMs` option.
fn with_options(limiter: ratekeeper::Limiter, options: Option<Js>, local: bool) -> CoreResult<Limiter> {
    let limiter = match opt_timeout(options.and_then(|o| o.get(c"waitTimeoutMs")), "wait_timeout")? {
        Some(wait) => limiter.with_wait_timeout(wait)?,
        None => limiter,
    };
    Ok(Limiter::new(limiter, local))
}

impl Backend {
    /// Whether the backend is in-process (its calls never wait on I/O).
    pub fn is_local(&self) -> bool {
        self.inner.memory_len().is_some()
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
        guard(&env, || Ok(Backend { inner: core(&env, args::options(&options).and_then(memory_backend))? }))
    }

    /// A standalone Redis server: `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS).
    /// Nothing connects until the first call.
    #[napi(factory, ts_args_type = "url: string, options?: RedisOptions")]
    pub fn redis(env: Env, url: Option<Unknown<'_>>, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || {
            let result = args::required(Js::opt(&url), "url")
                .and_then(|u| u.string("url"))
                .and_then(|url| redis_backend(RedisConfig::new(url), args::options(&options)?));
            Ok(Backend { inner: core(&env, result)? })
        })
    }

    /// A Redis Cluster reached through any of `seeds` (`redis://host:port` URLs).
    #[napi(factory, ts_args_type = "seeds: string[], options?: RedisOptions")]
    pub fn cluster(env: Env, seeds: Option<Unknown<'_>>, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || {
            let result = args::required(Js::opt(&seeds), "url")
                .and_then(|s| s.array("url"))
                .and_then(|list| list.into_iter().map(|s| s.string("url")).collect::<CoreResult<Vec<_>>>())
                .and_then(|seeds| redis_backend(RedisConfig::cluster(seeds), args::options(&options)?));
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
                let options = args::options(&options)?;
                let name = self::name(&name)?;
                let limit = count(Js::opt(&limit), "limit")?;
                let lock = opt_millis(options.and_then(|o| o.get(c"lockTimeoutMs")), "lock_timeout")?
                    .unwrap_or(DEFAULT_LOCK_TIMEOUT);
                let allow_fallback = match options.and_then(|o| o.get(c"allowFallback")) {
                    Some(flag) => flag.boolean("allow_fallback")?,
                    None => false,
                };
                let limiter = self.inner.concurrent(&name, limit, lock)?.with_allow_fallback(allow_fallback)?;
                with_options(limiter, options, self.is_local())
            };
            core(&env, build())
        })
    }

    /// `limit` per fixed window of `interval` (milliseconds, or `'second'`, `'minute'`, `'hour'`,
    /// `'day'`), windows aligned to multiples of the interval since the epoch.
    #[napi(
        ts_args_type = "name: string, limit: number, interval: number | 'second' | 'minute' | 'hour' | 'day', options?: LimiterOptions"
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
                let spec = LimiterSpec::Bucket {
                    limit: count(Js::opt(&limit), "limit")?,
                    interval: self::interval(Js::opt(&interval))?,
                };
                with_options(self.inner.limiter(&name, spec)?, args::options(&options)?, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Exact sliding window: never more than `limit` admissions in any span of `interval`
    /// (milliseconds or a named interval).
    #[napi(
        ts_args_type = "name: string, limit: number, interval: number | 'second' | 'minute' | 'hour' | 'day', options?: LimiterOptions"
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
                let window = WindowLimit {
                    limit: count(Js::opt(&limit), "limit")?,
                    interval: self::interval(Js::opt(&interval))?,
                };
                with_options(self.inner.windows(&name, &[window])?, args::options(&options)?, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Several exact sliding windows checked and recorded together (e.g. 25 per 5 s AND 300 per
    /// 60 s); decisions carry each window's state in `limits`.
    #[napi(ts_args_type = "name: string, windows: WindowLimitOptions[], options?: LimiterOptions")]
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
                let list = args::required(Js::opt(&windows), "windows")?.array("windows")?;
                let mut parsed = Vec::with_capacity(list.len());
                for w in list {
                    let w = w.object("windows")?;
                    parsed.push(WindowLimit {
                        limit: count(w.get(c"limit"), "limit")?,
                        interval: self::interval(w.get(c"intervalMs"))?,
                    });
                }
                with_options(self.inner.windows(&name, &parsed)?, args::options(&options)?, self.is_local())
            };
            core(&env, build())
        })
    }

    /// Several limits in one atomic check over sub-buckets of `precisionMs` (Carlson's sliding
    /// window): `[{ durationMs, limit, precisionMs? }, …]` or `[[durationMs, limit, precisionMs?], …]`.
    #[napi(
        ts_args_type = "name: string, limits: Array<SlidingLimitOptions | [number, number] | [number, number, number]>, options?: LimiterOptions"
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
                        Ok(_) => {
                            return Err(Error::invalid("limits", "each limit is [durationMs, limit, precisionMs?]"))
                        }
                        Err(_) => {
                            let o = l.object("limits")?;
                            (o.get(c"durationMs"), o.get(c"limit"), o.get(c"precisionMs"))
                        }
                    };
                    parsed.push(SlidingLimit {
                        duration: millis(duration, "duration")?,
                        limit: count(limit, "limit")?,
                        precision: opt_millis(precision, "precision")?,
                    });
                }
                with_options(self.inner.sliding_window(&name, &parsed)?, args::options(&options)?, self.is_local())
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
                with_options(self.inner.limiter(&name, spec)?, args::options(&options)?, self.is_local())
            };
            core(&env, build())
        })
    }

    /// A burst of `size`, then one call per `drainMs / size`; full again after `drainMs` idle.
    #[napi(ts_args_type = "name: string, size: number, drainMs: number, options?: LimiterOptions")]
    pub fn leaky(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        size: Option<Unknown<'_>>,
        drain_ms: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let spec = LimiterSpec::Leaky {
                    size: count(Js::opt(&size), "size")?,
                    drain: millis(Js::opt(&drain_ms), "drain")?,
                };
                with_options(self.inner.limiter(&name, spec)?, args::options(&options)?, self.is_local())
            };
            core(&env, build())
        })
    }

    /// A leaky bucket of `capacity` points refilled in `refillMs`: a call gives an estimate, and
    /// `pointsUsed` (or the permit of `withinLimit`) charges or refunds the difference.
    #[napi(ts_args_type = "name: string, capacity: number, refillMs: number, options?: LimiterOptions")]
    pub fn points(
        &self,
        env: Env,
        name: Option<Unknown<'_>>,
        capacity: Option<Unknown<'_>>,
        refill_ms: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let name = self::name(&name)?;
                let spec = LimiterSpec::Points {
                    capacity: count(Js::opt(&capacity), "capacity")?,
                    refill: millis(Js::opt(&refill_ms), "refill")?,
                };
                with_options(self.inner.limiter(&name, spec)?, args::options(&options)?, self.is_local())
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
                let options = args::options(&options)?;
                let name = self::name(&name)?;
                let limit = count(Js::opt(&limit), "limit")?;
                let period = CalendarPeriod::parse(&args::required(Js::opt(&period), "period")?.string("period")?)?;
                let tz = options.and_then(|o| o.get(c"tz")).map(|tz| tz.string("tz")).transpose()?;
                let anchor = match options.and_then(|o| o.get(c"anchor")) {
                    Some(a) => Some(count_from_f64("anchor", a.number("anchor")?)?.min(255) as u8),
                    None => None,
                };
                let limiter = self.inner.calendar(&name, limit, period, tz.as_deref().unwrap_or("UTC"), anchor)?;
                with_options(limiter, options, self.is_local())
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

/// The lock timeout of `concurrent()` when none is given (the contract's default).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);
