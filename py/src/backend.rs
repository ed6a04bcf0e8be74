//! `Backend`: where limiter state lives (memory, Redis, Redis Cluster), and the constructors of
//! every limiter.

use pyo3::inspect::PyStaticExpr;
use pyo3::prelude::*;
use std::marker::PhantomData;

use pyo3::types::{PyBytes, PyString};
use pyo3::{type_hint_identifier, type_hint_subscript, type_hint_union, Borrowed};
use ratekeeper::{
    CalendarPeriod, FailurePolicy, LimiterSpec, MemoryConfig, RedisConfig, SlidingLimit, TlsConfig, WindowLimit,
};

use crate::args::Key;
use crate::args::{
    invalid, Cost, Count, Flag, Float, Interval, LimitOrRate, PAllowFallback, PAnchor, PCapacity, PChunk,
    PConnectTimeout, PDb, PDeadline, PDenyCache, PDenyCacheMaxEntries, PDivisor, PDrain, PLeaseTtl, PLimit,
    PLockTimeout, PMaxKeys, PName, POnConflict, PPartitions, PPassword, PPeriod, PPrefix, PPriority, PRate, PRefill,
    PReplicaAcks, PReserved, PSeeds, PSentinelPassword, PSentinelTls, PSentinelUsername, PSentinels, PService, PSize,
    PTls, PTlsCaFile, PTlsCertFile, PTlsKeyFile, PTotalRate, PTz, PUrl, PUsername, PWaitTimeout, Param, PolicyName,
    Seconds, SpecArg, Text, Timeout,
};
use crate::clock::ClockArg;
use crate::decision::Metrics;
use crate::errors::{guard, guard_detached};
use crate::limiter::{Limiter, PyLimiter};
use crate::operate::{limiter_infos, metrics_list, LimiterInfo};

/// A place where limiter state lives, shared by every limiter built from it.
///
/// `Backend()` is a new in-process memory backend (the embedded default); `Backend.redis(url)`
/// and `Backend.cluster(seeds)` share limits between every process pointing at the same Redis.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct Backend {
    pub(crate) inner: ratekeeper::Backend,
    pub(crate) kind: &'static str,
}

/// Counts of what a Redis backend's failure policy has done.
#[pyclass(frozen, get_all, module = "ratekeeper._ratekeeper")]
pub struct BackendStats {
    /// Calls allowed because Redis failed, under `failure_policy="fail_open"`.
    failed_open: u64,
    /// Calls answered by the in-memory fallback, under `failure_policy="fallback"`.
    fell_back: u64,
    /// Calls that failed because Redis failed, under `failure_policy="fail_closed"`.
    failed: u64,
    /// Calls Redis refused (`BackendRejected`: a missing permission, a wrong password, memory
    /// full, a script error), under any policy: none was admitted.
    rejected: u64,
    /// Calls of a counting limiter that found the key's state last recorded by another
    /// configuration of the same name (e.g. a rolling deploy changing a limit).
    config_mismatches: u64,
}

#[pymethods]
impl BackendStats {
    fn __repr__(&self) -> String {
        format!(
            "BackendStats(failed_open={}, fell_back={}, failed={}, rejected={}, config_mismatches={})",
            self.failed_open, self.fell_back, self.failed, self.rejected, self.config_mismatches
        )
    }
}

const INT: PyStaticExpr = type_hint_identifier!("builtins", "int");
const FLOAT: PyStaticExpr = type_hint_identifier!("builtins", "float");
const STR: PyStaticExpr = type_hint_identifier!("builtins", "str");
const SEQUENCE: PyStaticExpr = type_hint_identifier!("collections.abc", "Sequence");
const TUPLE: PyStaticExpr = type_hint_identifier!("builtins", "tuple");

fn items<'py>(obj: Borrowed<'_, 'py, PyAny>, parameter: &'static str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = obj.py();
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(invalid(py, parameter, "must be a sequence, not a string".into()));
    }
    let iter = obj.try_iter().map_err(|_| invalid(py, parameter, "must be a sequence".into()))?;
    iter.collect()
}

/// The strings of the sequence `obj` (parameter `parameter`, each `hint`, e.g. `host:port`); an
/// item that is not one is named by its index (`seeds[1]`), as the core names one it refuses.
fn strings<P: Param>(obj: Borrowed<'_, '_, PyAny>, hint: &str) -> PyResult<Vec<String>> {
    let mut strings = Vec::new();
    for (i, item) in items(obj, P::NAME)?.into_iter().enumerate() {
        strings.push(item.extract::<Text<'_, P>>().map(|t| t.0.to_owned()).map_err(|_| {
            let message = format!(
                "must be a str ({hint}), got {}",
                item.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            );
            crate::errors::to_py_err(obj.py(), ratekeeper::Error::invalid_field(format!("{}[{i}]", P::NAME), message))
        })?);
    }
    Ok(strings)
}

/// Redis Cluster seed URLs.
pub(crate) struct Seeds(Vec<String>);

impl<'a, 'py> FromPyObject<'a, 'py> for Seeds {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_subscript!(SEQUENCE, STR);

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let seeds = strings::<PSeeds>(obj, "redis://host:port")?;
        if seeds.is_empty() {
            return Err(invalid(obj.py(), "seeds", "at least one seed node is required".into()));
        }
        Ok(Seeds(seeds))
    }
}

/// Sentinel addresses (`"host:port"`), checked by the core (each named `sentinels[i]`).
pub(crate) struct Sentinels(Vec<String>);

impl<'a, 'py> FromPyObject<'a, 'py> for Sentinels {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_subscript!(SEQUENCE, STR);

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Sentinels(strings::<PSentinels>(obj, "host:port")?))
    }
}

/// `windows(name, [(limit, interval), ...])` or a rate string, `windows(name, "25/5s; 300/minute")`.
pub(crate) struct Windows(Vec<WindowLimit>);

impl<'a, 'py> FromPyObject<'a, 'py> for Windows {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_union!(
        type_hint_subscript!(SEQUENCE, type_hint_subscript!(TUPLE, INT, type_hint_union!(FLOAT, STR))),
        STR
    );

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        if let Ok(text) = obj.cast::<PyString>() {
            let rates = ratekeeper::parse_rates("rate", text.to_str()?).map_err(|e| crate::errors::to_py_err(py, e))?;
            return Ok(Windows(
                rates.into_iter().map(|r| WindowLimit { limit: r.limit, interval: r.interval }).collect(),
            ));
        }
        let mut windows = Vec::new();
        for item in items(obj, "windows")? {
            let parts = items(item.as_borrowed(), "windows")?;
            let [limit, interval] = parts.as_slice() else {
                return Err(invalid(py, "windows", "each window must be a (limit, interval) pair".into()));
            };
            let limit = limit.extract::<Count<PLimit>>()?.0;
            let interval = interval.extract::<Interval>()?.0;
            windows.push(WindowLimit { limit, interval });
        }
        Ok(Windows(windows))
    }
}

/// `sliding_window(name, [(duration, limit), (duration, limit, precision), ...])`.
pub(crate) struct SlidingLimits(Vec<SlidingLimit>);

impl<'a, 'py> FromPyObject<'a, 'py> for SlidingLimits {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_subscript!(
        SEQUENCE,
        type_hint_union!(type_hint_subscript!(TUPLE, FLOAT, INT), type_hint_subscript!(TUPLE, FLOAT, INT, FLOAT))
    );

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let mut limits = Vec::new();
        for item in items(obj, "limits")? {
            let parts = items(item.as_borrowed(), "limits")?;
            if !(2..=3).contains(&parts.len()) {
                return Err(invalid(
                    py,
                    "limits",
                    "each limit must be (duration, limit) or (duration, limit, precision)".into(),
                ));
            }
            let duration = parts[0].extract::<Seconds<crate::args::PDuration>>()?.0;
            let limit = parts[1].extract::<Count<PLimit>>()?.0;
            let precision = match parts.get(2) {
                Some(p) if !p.is_none() => Some(p.extract::<Seconds<crate::args::PPrecision>>()?.0),
                _ => None,
            };
            limits.push(SlidingLimit { duration, limit, precision });
        }
        Ok(SlidingLimits(limits))
    }
}

/// PEM text (`str` or `bytes`).
pub(crate) struct Pem(Vec<u8>);

impl<'a, 'py> FromPyObject<'a, 'py> for Pem {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = type_hint_union!(STR, type_hint_identifier!("builtins", "bytes"));

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.cast::<PyString>() {
            return Ok(Pem(s.to_str()?.as_bytes().to_vec()));
        }
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Pem(b.as_bytes().to_vec()));
        }
        Err(invalid(obj.py(), "tls_ca_data", "must be PEM text (str or bytes)".into()))
    }
}

/// A file path (`str` or `os.PathLike`), given as parameter `P`.
pub(crate) struct Path<P>(std::path::PathBuf, PhantomData<P>);

impl<'a, 'py, P: Param> FromPyObject<'a, 'py> for Path<P> {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr =
        type_hint_union!(STR, type_hint_subscript!(type_hint_identifier!("os", "PathLike"), STR));

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        obj.extract::<std::path::PathBuf>()
            .map(|p| Path(p, PhantomData))
            .map_err(|_| invalid(obj.py(), P::NAME, "must be a str or os.PathLike".into()))
    }
}

fn read_file<P: Param>(py: Python<'_>, path: &Path<P>) -> PyResult<Vec<u8>> {
    std::fs::read(&path.0).map_err(|e| invalid(py, P::NAME, format!("cannot read {}: {e}", path.0.display())))
}

/// Names Python, with its version, as this process's language in the registry (`limiters()`).
fn name_python(py: Python<'_>) {
    let version = py.version_info();
    ratekeeper::set_client_language(&format!("python {}.{}.{}", version.major, version.minor, version.patch));
}

/// Registers, once per interpreter, an `atexit` hook that flushes every Redis backend's
/// pending counts and registrations as the process exits, so that a process living under a
/// second (one job, one script) still counts. Failing to register only loses that flush.
fn flush_at_exit(py: Python<'_>) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        let hook = pyo3::types::PyCFunction::new_closure(
            py,
            None,
            None,
            |args: &Bound<'_, pyo3::types::PyTuple>, _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>| {
                // No panic crosses into Python, even at exit.
                args.py().detach(|| {
                    let _ = std::panic::catch_unwind(ratekeeper::Backend::flush_every_backend_at_exit);
                });
            },
        );
        if let Ok(hook) = hook {
            let _ = py.import("atexit").and_then(|atexit| atexit.call_method1("register", (hook,)));
        }
    });
}

/// Declares the options `Backend.redis` and `Backend.cluster` share (everything besides where
/// Redis is) once, and makes of that one list the `RedisOptions` struct and both constructors,
/// whose keyword arguments are its fields; the rest of the `#[pymethods]` block is passed
/// through. pyo3 reads a method's keyword arguments from the method's own signature (a
/// `**options` one would reach the stubs without the options' names and types), so the list is
/// spliced into the block here rather than written out per constructor.
macro_rules! backend_pymethods {
    (
        options<$lt:lifetime> { $($(#[$option_doc:meta])* $option:ident: $ty:ty,)* }
        $($methods:tt)*
    ) => {
        /// The options `Backend.redis` and `Backend.cluster` share, each converted and checked
        /// by its own type, applied by one function for both.
        pub(crate) struct RedisOptions<$lt> {
            $($(#[$option_doc])* $option: Option<$ty>,)*
        }

        #[pymethods]
        impl Backend {
            /// A standalone Redis server: `redis://[user:password@]host:port[/db]` or `rediss://…`
            /// (TLS). Nothing connects until the first call; backends for the same URL share one
            /// connection set in this process.
            ///
            /// - `prefix`: namespace of every key (default `rk`).
            /// - `failure_policy`: what a call does when Redis cannot answer within `deadline`:
            ///   `"fail_closed"` (default: raise `BackendUnavailable` or `Timeout`), `"fail_open"`
            ///   (allow), `"fallback"` (an in-memory limiter with `1/fallback_divisor` of the limit).
            /// - `deadline`: seconds every call may take, answered or not (default 0.2).
            /// - `connect_timeout`: seconds to establish a connection (default 1).
            /// - `tls_ca_file` / `tls_ca_data`: the CA that signed the server's certificate (PEM);
            ///   `tls_cert_file` + `tls_key_file`: a client certificate for mutual TLS.
            /// - `clock`: a `ManualClock` whose time is sent with every call instead of the server's.
            /// - `deny_cache`: remember refusals in this process (default `False`): a check of at
            ///   least the refused cost is refused from memory until its `retry_after`, with no
            ///   round trip (see `Limiter.with_deny_cache`); `deny_cache_max_entries`: the most it
            ///   holds (default 10,000).
            /// - `replica_acks`: how many replicas must acknowledge each call's writes (`WAIT`)
            ///   before it admits (default 0: no waiting); too few within `deadline` fail the call as
            ///   unavailable, and `failure_policy` decides (`"fail_open"` then admits).
            /// - `on_conflict`: what building a limiter whose spec differs from the one live
            ///   processes use under its name does: `"warn"` (default: build it, warn once on
            ///   stderr naming both specs, count it in `metrics().spec_conflicts`, show it in
            ///   `limiters()`), or `"raise"` (read the registry first and raise `InvalidArgument`
            ///   naming `spec`). `set_limit` is how to change a limit fleet-wide.
            #[staticmethod]
            #[pyo3(signature = (url, *, $($option = None),*))]
            #[allow(clippy::too_many_arguments)]
            fn redis<$lt>(py: Python<'_>, url: Text<'_, PUrl>, $($option: Option<$ty>),*) -> PyResult<Self> {
                let options = RedisOptions { $($option),* };
                Backend::connect(py, options.apply(py, RedisConfig::new(url.0))?, "redis")
            }

            /// A Redis Cluster reached through any of `seeds` (`redis://host:port` URLs); MOVED and ASK
            /// redirections are followed. Takes the same options as `Backend.redis`.
            #[staticmethod]
            #[pyo3(signature = (seeds, *, $($option = None),*))]
            #[allow(clippy::too_many_arguments)]
            fn cluster<$lt>(py: Python<'_>, seeds: Seeds, $($option: Option<$ty>),*) -> PyResult<Self> {
                let options = RedisOptions { $($option),* };
                Backend::connect(py, options.apply(py, RedisConfig::cluster(seeds.0))?, "cluster")
            }

            /// A Sentinel-managed primary named `service` (the name in the sentinels' `sentinel
            /// monitor` line), found through any of `sentinels` (`"host:port"`, port 26379 when left
            /// out). Every connection asks the sentinels where the primary is and confirms its role
            /// before any call, so a failover is followed and no call goes to a replica.
            ///
            /// - `username`, `password`, `db`, `tls`: the data nodes' (primary's) credentials,
            ///   database and TLS (its certificates: the `tls_*` options);
            /// - `sentinel_username`, `sentinel_password`, `sentinel_tls`: the sentinels' own (with
            ///   `sentinel_tls`, they are trusted with the same `tls_*` certificates).
            ///
            /// Takes the same options as `Backend.redis`. The URL form
            /// `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]` works
            /// wherever a Redis URL does.
            #[staticmethod]
            #[pyo3(signature = (
                sentinels, service, *, username = None, password = None, db = None, tls = None,
                sentinel_username = None, sentinel_password = None, sentinel_tls = None, $($option = None),*
            ))]
            #[allow(clippy::too_many_arguments)]
            fn sentinel<$lt>(
                py: Python<'_>,
                sentinels: Sentinels,
                service: Text<$lt, PService>,
                username: Option<Text<$lt, PUsername>>,
                password: Option<Text<$lt, PPassword>>,
                db: Option<Cost<PDb>>,
                tls: Option<Flag<PTls>>,
                sentinel_username: Option<Text<$lt, PSentinelUsername>>,
                sentinel_password: Option<Text<$lt, PSentinelPassword>>,
                sentinel_tls: Option<Flag<PSentinelTls>>,
                $($option: Option<$ty>),*
            ) -> PyResult<Self> {
                let options = RedisOptions { $($option),* };
                let mut sentinel = ratekeeper::SentinelConfig::new(sentinels.0, service.0.to_owned());
                sentinel.username = username.map(|u| u.0.to_owned());
                sentinel.password = password.map(|p| p.0.to_owned());
                sentinel.db = db.map_or(0, |d| i64::try_from(d.0).unwrap_or(i64::MAX));
                sentinel.tls = tls.is_some_and(|t| t.0);
                sentinel.sentinel_username = sentinel_username.map(|u| u.0.to_owned());
                sentinel.sentinel_password = sentinel_password.map(|p| p.0.to_owned());
                let mut config = options.apply(py, RedisConfig::sentinel(sentinel.sentinels.clone(), &sentinel.service))?;
                if sentinel_tls.is_some_and(|t| t.0) {
                    sentinel.sentinel_tls = Some(config.tls.clone().unwrap_or_default());
                }
                config.sentinel = Some(sentinel);
                Backend::connect(py, config, "sentinel")
            }

            $($methods)*
        }
    };
}

impl RedisOptions<'_> {
    /// Applies the options to `config` (a standalone server's or a cluster's).
    fn apply(self, py: Python<'_>, mut config: RedisConfig) -> PyResult<RedisConfig> {
        name_python(py);
        if let Some(p) = self.prefix {
            config = config.prefix(p.0);
        }
        let policy = match (self.failure_policy.as_ref().map(|p| p.0), self.fallback_divisor.map(|d| d.0)) {
            (None | Some("fail_closed"), None) => FailurePolicy::FailClosed,
            (Some("fail_open"), None) => FailurePolicy::FailOpen,
            (Some("fallback"), divisor) => {
                let divisor = divisor.unwrap_or(1);
                let divisor = u32::try_from(divisor).map_err(|_| {
                    invalid(py, "fallback_divisor", format!("must be at most {}, got {divisor}", u32::MAX))
                })?;
                FailurePolicy::Fallback { divisor }
            }
            (None | Some("fail_closed" | "fail_open"), Some(_)) => {
                return Err(invalid(py, "fallback_divisor", "applies only to failure_policy=\"fallback\"".into()))
            }
            (Some(other), _) => {
                return Err(invalid(
                    py,
                    "failure_policy",
                    format!("must be \"fail_closed\", \"fail_open\" or \"fallback\", got {other:?}"),
                ))
            }
        };
        config = config.failure_policy(policy);
        if let Some(d) = self.deadline {
            config = config.deadline(d.0);
        }
        if let Some(t) = self.connect_timeout {
            config = config.connect_timeout(t.0);
        }
        if let Some(on) = self.deny_cache {
            config = config.deny_cache(on.0);
        }
        if let Some(n) = self.deny_cache_max_entries {
            config = config.deny_cache_max_entries(usize::try_from(n.0).unwrap_or(usize::MAX));
        }
        if let Some(on) = self.on_conflict {
            config = config.on_conflict(
                ratekeeper::OnConflict::from_name("on_conflict", on.0).map_err(|e| crate::errors::to_py_err(py, e))?,
            );
        }
        // Which parameter the CA came from, to name it if its PEM is bad.
        let ca_parameter = if self.tls_ca_file.is_some() { "tls_ca_file" } else { "tls_ca_data" };
        let ca = match (self.tls_ca_file, self.tls_ca_data) {
            (Some(_), Some(_)) => {
                return Err(invalid(py, "tls_ca_data", "give tls_ca_file or tls_ca_data, not both".into()))
            }
            (Some(path), None) => Some(read_file(py, &path)?),
            (None, Some(pem)) => Some(pem.0),
            (None, None) => None,
        };
        let client = match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert), Some(key)) => Some((read_file(py, &cert)?, read_file(py, &key)?)),
            (None, None) => None,
            (Some(_), None) => return Err(invalid(py, "tls_key_file", "is required with tls_cert_file".into())),
            (None, Some(_)) => return Err(invalid(py, "tls_cert_file", "is required with tls_key_file".into())),
        };
        if ca.is_some() || client.is_some() {
            let mut tls = TlsConfig::default();
            tls.ca_cert_pem = ca;
            tls.client_cert_and_key_pem = client;
            if let Err(ratekeeper::Error::InvalidArgument { parameter, message }) = tls.validate() {
                let parameter = match parameter.as_ref() {
                    "tls.ca" => ca_parameter,
                    "tls.cert" => "tls_cert_file",
                    _ => "tls_key_file",
                };
                return Err(invalid(py, parameter, message));
            }
            config = config.tls(tls);
        }
        if let Some(c) = self.clock {
            config = config.clock(c.0);
        }
        if let Some(n) = self.replica_acks {
            let n = u32::try_from(n.0)
                .map_err(|_| invalid(py, "replica_acks", format!("must be at most {}, got {}", u32::MAX, n.0)))?;
            config = config.replica_acks(n);
        }
        Ok(config)
    }
}

impl Backend {
    /// A Redis or Redis Cluster backend (`kind`) from its configuration.
    fn connect(py: Python<'_>, config: RedisConfig, kind: &'static str) -> PyResult<Self> {
        let inner = guard(py, || ratekeeper::Backend::redis_with(config))?;
        flush_at_exit(py);
        Ok(Backend { inner, kind })
    }

    fn wrap<'py>(&self, py: Python<'py>, limiter: PyResult<ratekeeper::Limiter>) -> PyResult<PyLimiter<'py>> {
        Limiter::wrap(py, limiter?, self.kind != "memory")
    }
}

backend_pymethods! {
    options<'a> {
        prefix: Text<'a, PPrefix>,
        failure_policy: PolicyName<'a>,
        fallback_divisor: Count<PDivisor>,
        deadline: Seconds<PDeadline>,
        connect_timeout: Seconds<PConnectTimeout>,
        tls_ca_file: Path<PTlsCaFile>,
        tls_ca_data: Pem,
        tls_cert_file: Path<PTlsCertFile>,
        tls_key_file: Path<PTlsKeyFile>,
        clock: ClockArg,
        deny_cache: Flag<PDenyCache>,
        deny_cache_max_entries: Count<PDenyCacheMaxEntries>,
        replica_acks: Cost<PReplicaAcks>,
        on_conflict: Text<'a, POnConflict>,
    }

    /// A new in-process memory backend with default settings.
    #[new]
    fn py_new(py: Python<'_>) -> Self {
        name_python(py);
        Backend { inner: ratekeeper::Backend::memory(), kind: "memory" }
    }

    /// A new in-process memory backend holding at most `max_keys` keys (when full, expired
    /// state is dropped first and new keys are refused with `BackendUnavailable` rather than
    /// resetting live ones). `clock`: a `ManualClock` for tests.
    #[staticmethod]
    #[pyo3(signature = (*, max_keys = None, clock = None))]
    fn memory(py: Python<'_>, max_keys: Option<Count<PMaxKeys>>, clock: Option<ClockArg>) -> PyResult<Self> {
        name_python(py);
        let mut config = MemoryConfig::default();
        if let Some(n) = max_keys {
            let n = usize::try_from(n.0).map_err(|_| invalid(py, "max_keys", "too large".into()))?;
            config = config.max_keys(n);
        }
        if let Some(c) = clock {
            config = config.clock(c.0);
        }
        let inner = guard(py, || ratekeeper::Backend::memory_with(config))?;
        Ok(Backend { inner, kind: "memory" })
    }

    /// `"memory"`, `"redis"`, `"cluster"` or `"sentinel"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// What the failure policy has done so far (all zero for memory backends).
    fn stats(&self) -> BackendStats {
        let s = self.inner.stats();
        BackendStats {
            failed_open: s.failed_open,
            fell_back: s.fell_back,
            failed: s.failed,
            rejected: s.rejected,
            config_mismatches: s.config_mismatches,
        }
    }

    /// Keys held by a memory backend (expired ones included until swept); None for Redis.
    fn memory_len(&self) -> Option<usize> {
        self.inner.memory_len()
    }

    /// At most `limit` holders at once: `acquire` returns a decision whose `lease` must be
    /// released. A lease older than `lock_timeout` seconds may be reclaimed by a waiter;
    /// `wait_timeout` is how long `acquire` and `within_limit` wait by default. `limit=1` is a
    /// distributed mutex.
    ///
    /// While Redis is unreachable a concurrent limiter fails closed, whatever the backend's
    /// failure policy, unless `allow_fallback=True`: then `fail_open` grants leases that guard
    /// nothing (fencing token 0) and `fallback` an in-process limiter (a limit per process, its
    /// fencing tokens increasing within the process only).
    #[pyo3(signature = (
        name, limit, lock_timeout = Seconds::new(ratekeeper::DEFAULT_LOCK_TIMEOUT), wait_timeout = None, *,
        allow_fallback = Flag::new(false)
    ))]
    fn concurrent<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        limit: Count<PLimit>,
        lock_timeout: Seconds<PLockTimeout>,
        wait_timeout: Option<Timeout<PWaitTimeout>>,
        allow_fallback: Flag<PAllowFallback>,
    ) -> PyResult<PyLimiter<'py>> {
        let limiter = guard(py, || {
            let l = self.inner.concurrent(name.0, limit.0, lock_timeout.0)?.with_allow_fallback(allow_fallback.0)?;
            match wait_timeout {
                Some(w) => l.with_wait_timeout(w.0),
                None => Ok(l),
            }
        });
        self.wrap(py, limiter)
    }

    /// `limit` per fixed window of `interval` (seconds, `"minute"` or a duration with its unit,
    /// `"1m"`), windows aligned to multiples of `interval` since the epoch; or a rate string in
    /// place of both: `bucket("api", "100/minute")`.
    #[pyo3(signature = (name, limit, interval=None))]
    fn bucket<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        limit: LimitOrRate,
        interval: Option<Interval>,
    ) -> PyResult<PyLimiter<'py>> {
        let (limit, interval) = limit.with_interval(py, interval)?;
        self.wrap(py, guard(py, || self.inner.bucket(name.0, limit, interval)))
    }

    /// Exact sliding window: never more than `limit` admissions in any span of `interval`
    /// (as for `bucket`); or a rate string in place of both: `window("login", "5/minute")`.
    #[pyo3(signature = (name, limit, interval=None))]
    fn window<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        limit: LimitOrRate,
        interval: Option<Interval>,
    ) -> PyResult<PyLimiter<'py>> {
        let (limit, interval) = limit.with_interval(py, interval)?;
        self.wrap(py, guard(py, || self.inner.window(name.0, limit, interval)))
    }

    /// Several exact sliding windows checked and recorded together, e.g.
    /// `windows("api", [(25, 5), (300, 60)])` or `windows("api", "25/5s; 300/minute")`;
    /// decisions carry one `limits` entry per window.
    fn windows<'py>(&self, py: Python<'py>, name: Text<'_, PName>, windows: Windows) -> PyResult<PyLimiter<'py>> {
        self.wrap(py, guard(py, || self.inner.windows(name.0, &windows.0)))
    }

    /// Several `(duration, limit[, precision])` limits over sub-buckets of `precision` seconds
    /// (none: a plain fixed window), checked atomically; only admitted calls count.
    fn sliding_window<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        limits: SlidingLimits,
    ) -> PyResult<PyLimiter<'py>> {
        self.wrap(py, guard(py, || self.inner.sliding_window(name.0, &limits.0)))
    }

    /// Refills `rate` tokens per second up to `capacity`; a call asks for `cost` tokens.
    fn token_bucket<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        rate: Float<PRate>,
        capacity: Count<PCapacity>,
    ) -> PyResult<PyLimiter<'py>> {
        self.wrap(py, guard(py, || self.inner.token_bucket(name.0, rate.0, capacity.0)))
    }

    /// A token bucket (`rate` per second up to `capacity`) shared by the fleet, whose tokens
    /// this process takes from Redis in leases of up to `chunk` (default capacity / 16) and
    /// spends in-process; unspent tokens go back on `close()` or at the next lease, or lapse
    /// `lease_ttl` seconds after they were taken. The fleet admits at most capacity + rate × (span + lease_ttl) over any
    /// span; leasing ahead may under-use it. On the memory backend: the token bucket.
    #[pyo3(signature = (name, rate, capacity, chunk = None, lease_ttl = Seconds::new(ratekeeper::DEFAULT_LEASED_LEASE_TTL)))]
    fn leased<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        rate: Float<PRate>,
        capacity: Count<PCapacity>,
        chunk: Option<Count<PChunk>>,
        lease_ttl: Seconds<PLeaseTtl>,
    ) -> PyResult<PyLimiter<'py>> {
        let chunk = chunk.map(|c| c.0);
        self.wrap(py, guard(py, || self.inner.leased(name.0, rate.0, capacity.0, chunk, lease_ttl.0)))
    }

    /// A burst of `size`, then one call per `drain / size` seconds; after `drain` seconds idle
    /// the full burst is back.
    fn leaky<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        size: Count<PSize>,
        drain: Seconds<PDrain>,
    ) -> PyResult<PyLimiter<'py>> {
        self.wrap(py, guard(py, || self.inner.leaky(name.0, size.0, drain.0)))
    }

    /// Leased partitions (Azure's rate limiting pattern): `total_rate` units per second split
    /// into `partitions` equal partitions. On Redis each process leases a fair share of them for
    /// `lease_ttl` seconds (renewed while it calls) and `check`/`acquire` pace it to the rate it
    /// holds (20 calls per 200 ms at 100/s, not 100 at once); a dead process's partitions return
    /// after `lease_ttl`, and `close()` gives them back at once. The first `reserved` partitions
    /// belong to limiters built with `priority=True`, the rest to the others. On memory the
    /// process holds every partition of its class.
    #[pyo3(signature = (
        name, total_rate, partitions, lease_ttl = Seconds::new(ratekeeper::DEFAULT_PARTITIONS_LEASE_TTL),
        reserved = Cost::ZERO, *, priority = Flag::new(false)
    ))]
    #[allow(clippy::too_many_arguments)]
    fn partitions<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        total_rate: Float<PTotalRate>,
        partitions: Count<PPartitions>,
        lease_ttl: Seconds<PLeaseTtl>,
        reserved: Cost<PReserved>,
        priority: Flag<PPriority>,
    ) -> PyResult<PyLimiter<'py>> {
        self.wrap(
            py,
            guard(py, || {
                self.inner.partitions(name.0, total_rate.0, partitions.0, lease_ttl.0, reserved.0, priority.0)
            }),
        )
    }

    /// A leaky bucket of `capacity` points refilled completely in `refill` seconds: a call
    /// gives an estimate as its cost, and `points_used(estimate, actual)` charges or refunds
    /// the difference.
    fn points<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        capacity: Count<PCapacity>,
        refill: Seconds<PRefill>,
    ) -> PyResult<PyLimiter<'py>> {
        self.wrap(py, guard(py, || self.inner.points(name.0, capacity.0, refill.0)))
    }

    /// `limit` per calendar `period` (`"day"`, `"week"` from Monday, `"month"`, `"year"`) in IANA
    /// time zone `tz` (default UTC); months start on day `anchor` (1-31, clamped to the month's
    /// last day; default 1).
    #[pyo3(signature = (name, limit, period, tz = None, anchor = None))]
    fn calendar<'py>(
        &self,
        py: Python<'py>,
        name: Text<'_, PName>,
        limit: Count<PLimit>,
        period: Text<'_, PPeriod>,
        tz: Option<Text<'_, PTz>>,
        anchor: Option<Count<PAnchor>>,
    ) -> PyResult<PyLimiter<'py>> {
        let (tz, anchor) = (tz.map_or("UTC", |tz| tz.0), anchor.map(|a| a.0.min(255) as u8));
        self.wrap(py, guard(py, || self.inner.calendar(name.0, limit.0, CalendarPeriod::parse(period.0)?, tz, anchor)))
    }

    /// A limiter built from its spec as data: a dict or a JSON string, durations in seconds,
    /// e.g. `{"kind": "token_bucket", "rate": 10, "capacity": 20}` (see the README's "Specs as
    /// data"). A bad field raises `InvalidArgument` naming its path (`rate`, `windows[1]`).
    fn limiter<'py>(&self, py: Python<'py>, name: Text<'_, PName>, spec: SpecArg) -> PyResult<PyLimiter<'py>> {
        self.wrap(py, guard(py, || self.inner.limiter_from_json(name.0, &spec.0)))
    }

    /// A limiter that always allows and touches no backend (`ratekeeper.unlimited()` is the
    /// same without a name).
    #[pyo3(signature = (name = None))]
    fn unlimited<'py>(&self, py: Python<'py>, name: Option<Text<'_, PName>>) -> PyResult<PyLimiter<'py>> {
        match name {
            Some(name) => self.wrap(py, guard(py, || self.inner.limiter(name.0, LimiterSpec::Unlimited))),
            None => Limiter::wrap(py, ratekeeper::Limiter::unlimited(), false),
        }
    }

    /// Every limiter the backend knows, by name: on Redis the registry (any process, any
    /// language, last 90 days), on memory this process's; each with its live overrides.
    fn limiters(&self, py: Python<'_>) -> PyResult<Vec<LimiterInfo>> {
        Ok(limiter_infos(guard_detached(py, || self.inner.limiters_blocking())?))
    }

    /// Overrides limiter `name`'s spec (a dict or JSON string, as for `limiter`), or one
    /// `key`'s, in every process using this backend: each applies it within a fraction of a
    /// second, keeping the state it has. Raises `InvalidArgument` naming a bad field before
    /// anything is written.
    #[pyo3(signature = (name, spec, key = None))]
    fn set_limit(&self, py: Python<'_>, name: Text<'_, PName>, spec: SpecArg, key: Key<'_>) -> PyResult<()> {
        let key = crate::args::key(&key);
        guard_detached(py, || self.inner.set_limit_json_blocking(name.0, &spec.0, key))
    }

    /// Removes the override of `name`, or of one `key` of it (nothing if there is none).
    #[pyo3(signature = (name, key = None))]
    fn clear_limit(&self, py: Python<'_>, name: Text<'_, PName>, key: Key<'_>) -> PyResult<()> {
        let key = crate::args::key(&key);
        guard_detached(py, || self.inner.clear_limit_blocking(name.0, key))
    }

    /// Decides every part `(limiter, key, cost)` in one atomic step at one instant: all are
    /// admitted and consume their cost, or none consumes anything. Never waits. On Redis it is
    /// one script call; on a Redis Cluster the parts' keys must share one slot (limiters built
    /// with `"colocate": "tenant"` and keys of one tenant), or `InvalidArgument` names `parts`
    /// and the limiters. A bad part raises `InvalidArgument` naming it (`parts[1].cost`) before
    /// anything is written. Leased token buckets and partitions cannot take part.
    fn check_all(
        &self,
        py: Python<'_>,
        parts: crate::check_all::Parts,
    ) -> PyResult<Py<crate::check_all::CombinedDecision>> {
        crate::check_all::check_all(py, &self.inner, parts)
    }

    /// Like `check_all`, waiting up to `wait_timeout` seconds (default: the shortest of the
    /// parts' limiters') for a step that admits every part; raises `OverLimit` with the
    /// combination's `retry_after` when waiting cannot succeed in time.
    #[pyo3(signature = (parts, wait_timeout = None))]
    fn acquire_all(
        &self,
        py: Python<'_>,
        parts: crate::check_all::Parts,
        wait_timeout: Option<crate::args::Timeout<crate::args::PWaitTimeout>>,
    ) -> PyResult<Py<crate::check_all::CombinedDecision>> {
        crate::check_all::acquire_all(py, &self.inner, parts, wait_timeout.map(|w| w.0))
    }

    /// asyncio form of `check_all`.
    fn acheck_all<'py>(
        &self,
        py: Python<'py>,
        parts: crate::check_all::Parts,
    ) -> PyResult<crate::limiter::Fut<'py, crate::check_all::CombinedDecision>> {
        crate::check_all::acheck_all(py, &self.inner, parts, None)
    }

    /// asyncio form of `acquire_all`.
    #[pyo3(signature = (parts, wait_timeout = None))]
    fn aacquire_all<'py>(
        &self,
        py: Python<'py>,
        parts: crate::check_all::Parts,
        wait_timeout: Option<crate::args::Timeout<crate::args::PWaitTimeout>>,
    ) -> PyResult<crate::limiter::Fut<'py, crate::check_all::CombinedDecision>> {
        crate::check_all::acheck_all(py, &self.inner, parts, Some(wait_timeout.map(|w| w.0)))
    }

    /// Sends this process's pending metric counts and registrations to Redis now (they are
    /// sent once a second anyway): call it before a short-lived process exits.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        guard_detached(py, || self.inner.flush_blocking())
    }

    /// Every limiter's metrics as `(name, kind, Metrics)`: this process's, or with `fleet`
    /// every process's (read from Redis).
    #[pyo3(signature = (*, fleet = false))]
    fn metrics(&self, py: Python<'_>, fleet: bool) -> PyResult<Vec<(String, &'static str, Metrics)>> {
        Ok(metrics_list(guard_detached(py, || self.inner.metrics_blocking(fleet))?))
    }

    /// Starts timing this backend's calls for `durations()` (what `ratekeeper.otel` records
    /// into its duration histograms). Counted: each call needs its `stop_observing()`.
    fn start_observing(&self) {
        self.inner.start_observing();
    }

    /// Ends one `start_observing()`; the durations counted so far stay readable.
    fn stop_observing(&self) {
        self.inner.stop_observing();
    }

    /// Starts tracing this backend's sync `check` and `acquire` calls: each hands its Redis
    /// round trips (command, times, server; never a key) and its decision to `ratekeeper.otel`,
    /// which makes the spans. Counted: each call needs its `stop_tracing()`.
    fn start_tracing(&self) {
        self.inner.start_tracing();
    }

    /// Ends one `start_tracing()`.
    fn stop_tracing(&self) {
        self.inner.stop_tracing();
    }

    /// Identifies this backend within the process (what `ratekeeper.otel` keeps its tracers by).
    #[getter]
    fn id(&self) -> usize {
        self.inner.id()
    }

    /// The durations of this process's observed calls, cumulative, as `(name, kind, call,
    /// outcome, counts, sums_ns)`: `call` is `"check"` or `"wait"`, `counts` the calls per
    /// bucket of `duration_bounds()` (then the unbounded bucket), `sums_ns` their total
    /// durations in nanoseconds per bucket. Never the key.
    #[allow(clippy::type_complexity)]
    fn durations(&self) -> Vec<(String, &'static str, &'static str, &'static str, Vec<u64>, Vec<u64>)> {
        let mut out = Vec::new();
        for (name, kind, all) in self.inner.durations() {
            for s in all {
                let call = s.call.as_str();
                out.push((name.clone(), kind.as_str(), call, s.outcome, s.counts.to_vec(), s.sums_nanos.to_vec()));
            }
        }
        out
    }

    /// Upper bounds (seconds) of the buckets of `durations()`.
    #[staticmethod]
    fn duration_bounds() -> Vec<f64> {
        ratekeeper::observe::DURATION_BOUNDS.to_vec()
    }

    /// Every limiter's metrics in the Prometheus text exposition format (this process's, or
    /// with `fleet` every process's); `ratekeeper.prometheus.register` adds them to a
    /// `prometheus_client` registry.
    #[pyo3(signature = (*, fleet = false))]
    fn prometheus(&self, py: Python<'_>, fleet: bool) -> PyResult<String> {
        guard_detached(py, || self.inner.prometheus_blocking(fleet))
    }

    fn __repr__(&self) -> String {
        format!("Backend(kind={:?})", self.kind)
    }
}
