//! `rk_backend_new_from_json`: a backend from its configuration as data, reaching every option
//! the Python and Node constructors have (connect timeout, TLS material, the registry's client
//! name, memory shards) without a positional parameter per option; its `_with_clock` form adds
//! the one option JSON cannot carry, a manual clock. Bindings that reach the library through
//! the C ABI (Ruby's gem) build every backend with it.

use std::os::raw::c_char;
use std::sync::Arc;

use ratekeeper::params::duration_from_secs;
use ratekeeper::{Backend, Clock, Error, FailurePolicy, MemoryConfig, RedisConfig, SentinelConfig, TlsConfig};
use serde_json::{Map, Value};

use crate::args::{arg_ref, arg_str, Out};
use crate::backend::{publish_as, rk_backend};
use crate::clock::rk_manual_clock;
use crate::error::{rk_status, Failure};
use crate::panic::ffi_status;

/// Every field the configuration may hold; anything else is refused, naming it.
const FIELDS: &[&str] = &[
    "kind",
    "url",
    "seeds",
    "sentinel",
    "replica_acks",
    "prefix",
    "failure_policy",
    "fallback_divisor",
    "deadline",
    "connect_timeout",
    "tls_ca_file",
    "tls_ca_data",
    "tls_cert_file",
    "tls_key_file",
    "deny_cache",
    "deny_cache_max_entries",
    "on_conflict",
    "max_keys",
    "shards",
    "client",
];

/// The fields of one configuration, read with errors that name the field.
struct Fields(Map<String, Value>);

impl Fields {
    fn str(&self, field: &'static str) -> Result<Option<&str>, Error> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(Error::invalid(field, format!("must be a string, got {other}"))),
        }
    }

    fn whole(&self, field: &'static str, max: u64) -> Result<Option<u64>, Error> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if v <= max => Ok(Some(v)),
                _ => Err(Error::invalid(field, format!("must be a whole number from 0 to {max}, got {n}"))),
            },
            Some(other) => Err(Error::invalid(field, format!("must be a whole number, got {other}"))),
        }
    }

    fn seconds(&self, field: &'static str) -> Result<Option<std::time::Duration>, Error> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                let secs = n.as_f64().ok_or_else(|| Error::invalid(field, format!("must be seconds, got {n}")))?;
                Ok(Some(duration_from_secs(field, secs)?))
            }
            Some(other) => Err(Error::invalid(field, format!("must be a number of seconds, got {other}"))),
        }
    }

    fn file(&self, field: &'static str) -> Result<Option<Vec<u8>>, Error> {
        match self.str(field)? {
            None => Ok(None),
            Some(path) => {
                std::fs::read(path).map(Some).map_err(|e| Error::invalid(field, format!("cannot read {path}: {e}")))
            }
        }
    }
}

/// The failure policy from `failure_policy` and `fallback_divisor`.
fn policy(fields: &Fields) -> Result<FailurePolicy, Error> {
    let divisor = fields.whole("fallback_divisor", u64::from(u32::MAX))?;
    match (fields.str("failure_policy")?, divisor) {
        (None | Some("fail_closed"), None) => Ok(FailurePolicy::FailClosed),
        (Some("fail_open"), None) => Ok(FailurePolicy::FailOpen),
        (Some("fallback"), Some(0)) => Err(Error::invalid("fallback_divisor", "must be at least 1")),
        // Checked against u32::MAX by `whole` above.
        (Some("fallback"), divisor) => Ok(FailurePolicy::Fallback { divisor: divisor.map_or(1, |d| d as u32) }),
        (None | Some("fail_closed" | "fail_open"), Some(_)) => {
            Err(Error::invalid("fallback_divisor", "applies only to failure_policy \"fallback\""))
        }
        (Some(other), _) => Err(Error::invalid(
            "failure_policy",
            format!("must be \"fail_closed\", \"fail_open\" or \"fallback\", got {other:?}"),
        )),
    }
}

/// TLS material from the `tls_*` fields, checked now (a bad PEM names its field).
fn tls(fields: &Fields) -> Result<Option<TlsConfig>, Error> {
    let ca_field = if fields.str("tls_ca_file")?.is_some() { "tls_ca_file" } else { "tls_ca_data" };
    let ca = match (fields.file("tls_ca_file")?, fields.str("tls_ca_data")?) {
        (Some(_), Some(_)) => return Err(Error::invalid("tls_ca_data", "give tls_ca_file or tls_ca_data, not both")),
        (Some(pem), None) => Some(pem),
        (None, Some(pem)) => Some(pem.as_bytes().to_vec()),
        (None, None) => None,
    };
    // The pair is checked before either file is read: a missing half is named as such.
    let client = match (fields.str("tls_cert_file")?, fields.str("tls_key_file")?) {
        (Some(_), Some(_)) => {
            Some((fields.file("tls_cert_file")?.unwrap_or_default(), fields.file("tls_key_file")?.unwrap_or_default()))
        }
        (None, None) => None,
        (Some(_), None) => return Err(Error::invalid("tls_key_file", "is required with tls_cert_file")),
        (None, Some(_)) => return Err(Error::invalid("tls_cert_file", "is required with tls_key_file")),
    };
    if ca.is_none() && client.is_none() {
        return Ok(None);
    }
    let mut tls = TlsConfig::default();
    tls.ca_cert_pem = ca;
    tls.client_cert_and_key_pem = client;
    if let Err(Error::InvalidArgument { parameter, message }) = tls.validate() {
        let field = match parameter.as_ref() {
            "tls.ca" => ca_field,
            "tls.cert" => "tls_cert_file",
            _ => "tls_key_file",
        };
        return Err(Error::invalid(field, message));
    }
    Ok(Some(tls))
}

/// The strings of the array `list` (field `parameter`); an item that is not one is named by its
/// index (`seeds[1]`), as the core names one it refuses.
fn strings(list: &[Value], parameter: &str, what: &str) -> Result<Vec<String>, Error> {
    let item = |(i, value): (usize, &Value)| match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(Error::invalid_field(format!("{parameter}[{i}]"), format!("must be {what}, got {other}"))),
    };
    list.iter().enumerate().map(item).collect()
}

/// The fields of a `sentinel` object; anything else is refused, naming it.
const SENTINEL_FIELDS: &[&str] = &[
    "addresses",
    "service",
    "username",
    "password",
    "db",
    "tls",
    "sentinel_username",
    "sentinel_password",
    "sentinel_tls",
];

/// A Sentinel-managed primary from the `sentinel` object (its fields named `sentinel.…`);
/// `node_tls` is the data nodes' TLS material, which the sentinels trust too with
/// `sentinel_tls`.
fn sentinel(value: &Value, node_tls: Option<&TlsConfig>) -> Result<SentinelConfig, Error> {
    let Value::Object(map) = value else {
        return Err(Error::invalid(
            "sentinel",
            format!("must be an object {{\"addresses\": [...], \"service\": ...}}, got {value}"),
        ));
    };
    if let Some(unknown) = map.keys().find(|k| !SENTINEL_FIELDS.contains(&k.as_str())) {
        return Err(Error::invalid("sentinel", format!("has an unknown field {unknown:?}")));
    }
    let text = |field: &str| match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(Error::invalid_field(format!("sentinel.{field}"), format!("must be a string, got {other}"))),
    };
    let flag = |field: &str| match map.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(on)) => Ok(*on),
        Some(other) => {
            Err(Error::invalid_field(format!("sentinel.{field}"), format!("must be true or false, got {other}")))
        }
    };
    let Some(Value::Array(list)) = map.get("addresses") else {
        return Err(Error::invalid("sentinel.addresses", "must be an array of \"host:port\" strings"));
    };
    let addresses = strings(list, "sentinel.addresses", "a \"host:port\" string")?;
    let service = text("service")?.ok_or_else(|| Error::invalid("sentinel.service", "is required"))?;
    let mut config = SentinelConfig::new(addresses, service);
    config.username = text("username")?;
    config.password = text("password")?;
    config.db = match map.get("db") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => {
            n.as_i64().ok_or_else(|| Error::invalid("sentinel.db", format!("must be a whole number, got {n}")))?
        }
        Some(other) => return Err(Error::invalid("sentinel.db", format!("must be a whole number, got {other}"))),
    };
    config.tls = flag("tls")?;
    config.sentinel_username = text("sentinel_username")?;
    config.sentinel_password = text("sentinel_password")?;
    if flag("sentinel_tls")? {
        config.sentinel_tls = Some(node_tls.cloned().unwrap_or_default());
    }
    Ok(config)
}

/// The core's error about a Sentinel configuration, named by its place in the JSON
/// (`sentinels[1]` is `sentinel.addresses[1]`, `service` is `sentinel.service`).
fn in_sentinel_object(error: Error) -> Error {
    match error {
        Error::InvalidArgument { parameter, message } => {
            let parameter = match parameter.as_ref() {
                p if p.starts_with("sentinels") => p.replacen("sentinels", "sentinel.addresses", 1),
                p @ ("service" | "db") => format!("sentinel.{p}"),
                p => p.to_owned(),
            };
            Error::invalid_field(parameter, message)
        }
        other => other,
    }
}

/// Reads the configuration and builds the backend it describes (on `clock`, when given),
/// naming it to the registry.
fn build(json: &str, clock: Option<Arc<dyn Clock>>) -> Result<(Backend, Option<String>), Error> {
    let value: Value = serde_json::from_str(json).map_err(|e| Error::invalid("json", format!("is not JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(Error::invalid("json", "must be a JSON object"));
    };
    if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Error::invalid("json", format!("has an unknown field {unknown:?}")));
    }
    let fields = Fields(map);
    let client = fields.str("client")?.map(str::to_owned);
    let kind = match fields.str("kind")? {
        Some(kind) => kind,
        None if fields.0.contains_key("seeds") => "cluster",
        None if fields.0.contains_key("sentinel") => "sentinel",
        None if fields.0.contains_key("url") => "redis",
        None => "memory",
    };
    let mut config = match kind {
        "memory" => {
            // FIELDS lists the memory backend's own (and `kind`, `client`) last.
            let redis_only = &FIELDS[1..FIELDS.len() - 3];
            if let Some(field) = redis_only.iter().find(|f| fields.0.contains_key(**f)) {
                return Err(Error::invalid(field, "applies only to kind \"redis\" or \"cluster\""));
            }
            let max_keys = fields.whole("max_keys", u64::MAX)?.map_or(Ok(1_000_000), usize::try_from);
            let max_keys = max_keys.map_err(|_| Error::invalid("max_keys", "does not fit this platform's size_t"))?;
            let mut config = MemoryConfig::default().max_keys(max_keys);
            if let Some(shards) = fields.whole("shards", 1 << 16)? {
                // At most 2^16 (checked by `whole`), so it fits every size_t.
                config = config.shards(shards as usize);
            }
            if let Some(clock) = clock {
                config = config.clock(clock);
            }
            return Ok((Backend::memory_with(config)?, client));
        }
        "redis" => {
            let url = fields.str("url")?.ok_or_else(|| Error::invalid("url", "is required with kind \"redis\""))?;
            for field in ["seeds", "sentinel"] {
                if fields.0.contains_key(field) {
                    return Err(Error::invalid(field, "applies only to its own kind (\"cluster\", \"sentinel\")"));
                }
            }
            RedisConfig::new(url)
        }
        "sentinel" => {
            for field in ["url", "seeds"] {
                if fields.0.contains_key(field) {
                    return Err(Error::invalid(field, "applies only to kind \"redis\" or \"cluster\""));
                }
            }
            let value = fields
                .0
                .get("sentinel")
                .ok_or_else(|| Error::invalid("sentinel", "is required with kind \"sentinel\""))?;
            let sentinel = sentinel(value, tls(&fields)?.as_ref())?;
            let mut config = RedisConfig::sentinel(sentinel.sentinels.clone(), sentinel.service.clone());
            config.sentinel = Some(sentinel);
            config
        }
        "cluster" => {
            let Some(Value::Array(seeds)) = fields.0.get("seeds") else {
                return Err(Error::invalid("seeds", "must be an array of seed URLs with kind \"cluster\""));
            };
            if seeds.is_empty() {
                return Err(Error::invalid("seeds", "at least one seed node is required"));
            }
            for field in ["url", "sentinel"] {
                if fields.0.contains_key(field) {
                    return Err(Error::invalid(field, "applies only to its own kind (a cluster takes seeds)"));
                }
            }
            RedisConfig::cluster(strings(seeds, "seeds", "a URL string")?)
        }
        other => {
            return Err(Error::invalid(
                "kind",
                format!("must be \"memory\", \"redis\", \"cluster\" or \"sentinel\", got {other:?}"),
            ))
        }
    };
    for field in ["max_keys", "shards"] {
        if fields.0.contains_key(field) {
            return Err(Error::invalid(field, "applies only to kind \"memory\""));
        }
    }
    if let Some(prefix) = fields.str("prefix")? {
        config = config.prefix(prefix);
    }
    config = config.failure_policy(policy(&fields)?);
    if let Some(deadline) = fields.seconds("deadline")? {
        config = config.deadline(deadline);
    }
    if let Some(timeout) = fields.seconds("connect_timeout")? {
        config = config.connect_timeout(timeout);
    }
    if let Some(tls) = tls(&fields)? {
        config = config.tls(tls);
    }
    match fields.0.get("deny_cache") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(on)) => config = config.deny_cache(*on),
        Some(other) => return Err(Error::invalid("deny_cache", format!("must be true or false, got {other}"))),
    }
    if let Some(max) = fields.whole("deny_cache_max_entries", u64::from(u32::MAX))? {
        config = config.deny_cache_max_entries(max as usize);
    }
    match fields.0.get("on_conflict") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) => {
            config = config.on_conflict(ratekeeper::OnConflict::from_name("on_conflict", name)?)
        }
        Some(other) => {
            return Err(Error::invalid("on_conflict", format!("must be \"warn\" or \"raise\", got {other}")))
        }
    }
    if let Some(acks) = fields.whole("replica_acks", u64::from(u32::MAX))? {
        config = config.replica_acks(acks as u32);
    }
    if let Some(clock) = clock {
        config = config.clock(clock);
    }
    let is_sentinel = config.sentinel.is_some() && kind == "sentinel";
    let backend = Backend::redis_with(config).map_err(|e| if is_sentinel { in_sentinel_object(e) } else { e })?;
    Ok((backend, client))
}

/// \brief Creates a backend from its configuration as JSON: every option of the other
/// constructors, plus those they have no parameter for (a connect timeout, TLS material).
///
/// Fields (all optional; durations in seconds):
/// - `kind`: `"memory"`, `"redis"`, `"cluster"` or `"sentinel"` (default: `"cluster"` with
///   `seeds`, `"sentinel"` with `sentinel`, `"redis"` with `url`, else `"memory"`);
/// - memory: `max_keys` (default 1,000,000); `shards`, the number of lock shards (1 to 65536,
///   rounded up to a power of two; default 64);
/// - Redis: `url` (`redis://`, `rediss://` or `redis+sentinel://`), or `seeds` (an array of
///   URLs) for a cluster, or `sentinel` for a Sentinel-managed primary: `{"addresses":
///   ["host:port", …], "service": "…"}` with, optionally, the data nodes' `username`,
///   `password`, `db` and `tls` (true: TLS with the `tls_*` material) and the sentinels' own
///   `sentinel_username`, `sentinel_password` and `sentinel_tls` (true: TLS, trusting the same
///   material); `replica_acks`: how many replicas must acknowledge each call's writes (`WAIT`)
///   before it admits (default 0), too few within the deadline failing the call as unavailable
///   for the failure policy to decide (`"fail_open"` then admits);
///   `prefix`; `failure_policy` (`"fail_closed"`, `"fail_open"`, `"fallback"`) and
///   `fallback_divisor` (with `"fallback"` only, default 1); `deadline` (default 0.2);
///   `connect_timeout` (default 1); `tls_ca_file` or `tls_ca_data` (PEM text), and
///   `tls_cert_file` with `tls_key_file` (mutual TLS), read and checked now; `deny_cache`
///   (`true`: limiters remember refusals in process, see `rk_limiter_with_deny_cache`; default
///   `false`) and `deny_cache_max_entries` (default 10,000); `on_conflict` (`"warn"`, the
///   default: a limiter whose spec differs from the one live processes use under its name is
///   built, said once on stderr and counted in `spec_conflicts`; `"raise"`: refused with
///   #RK_INVALID_ARGUMENT naming `spec`);
/// - `client`: the language this process's limiters are listed under in the registry
///   (`rk_backend_limiters_json`'s `users`, e.g. `"ruby 3.1.2"`; default `"c"`); the first
///   backend a process makes fixes it.
///
/// Nothing connects until the first call (as with `rk_backend_new_redis`).
///
/// \param json The configuration, a NUL-terminated UTF-8 JSON object.
/// \param backend_out Receives the new backend; free it with `rk_backend_free`.
/// \return #RK_OK, #RK_NULL_PARAMETER, #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT (the message
///         names the bad field, or `json` when the text is not a JSON object or has an unknown
///         field).
#[no_mangle]
pub extern "C" fn rk_backend_new_from_json(json: *const c_char, backend_out: *mut *mut rk_backend) -> rk_status {
    ffi_status! {
        let out = Out::new("backend_out", backend_out)?;
        let json = arg_str("json", json)?;
        let (backend, client) = build(json, None).map_err(Failure::from)?;
        publish_as(out, backend, client.as_deref().unwrap_or("c"));
        Ok(())
    }
}

/// \brief `rk_backend_new_from_json` on a manual clock: the backend's limiters read time from
/// `clock` (a memory backend), or send its time with every call instead of the server's (Redis,
/// Redis Cluster) — the one option a JSON text cannot carry. For tests and the conformance
/// vectors, as Python's `Backend.redis(url, clock=...)` and Node's `{ clock }`.
///
/// The backend keeps what it needs of the clock alive, so the clock may be freed first.
///
/// \param json The configuration, as for `rk_backend_new_from_json`.
/// \param clock The clock.
/// \param backend_out Receives the new backend; free it with `rk_backend_free`.
/// \return As `rk_backend_new_from_json`; #RK_NULL_PARAMETER names `clock` when it is NULL.
#[no_mangle]
pub extern "C" fn rk_backend_new_from_json_with_clock(
    json: *const c_char,
    clock: *const rk_manual_clock,
    backend_out: *mut *mut rk_backend,
) -> rk_status {
    ffi_status! {
        let out = Out::new("backend_out", backend_out)?;
        let json = arg_str("json", json)?;
        let clock: Arc<dyn Clock> = Arc::new(arg_ref("clock", clock)?.inner.clone());
        let (backend, client) = build(json, Some(clock)).map_err(Failure::from)?;
        publish_as(out, backend, client.as_deref().unwrap_or("c"));
        Ok(())
    }
}
