//! A Sentinel-managed primary: its sentinels name it (`SENTINEL get-master-addr-by-name`), each
//! new connection to it confirms its role (`ROLE`) before any call is sent, so no call is ever
//! written to a replica.
//!
//! Nothing is cached between connections: every connection is made to the address the sentinels
//! name at that moment. The connections already follow a failover by being replaced: a lost
//! connection (the primary died, or Sentinel's `CLIENT KILL` when it demoted it), a `READONLY`
//! reply or a call's timeout drops the connection (see [`super::scripts`]), and the next one asks
//! the sentinels again. The sentinels are asked from the calling thread, with the blocking
//! connections of [`super::sync_client`] (from a blocking task for the runtime's connections),
//! so one resolution serves every kind of connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Value};

use super::config::TlsConfig;
use super::sync_client::{SyncConnection, SyncTarget};
use crate::error::{Error, Result};

/// Where a sentinel listens when an address names no port.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The URL schemes of a Sentinel-managed primary (plain, and TLS to the data nodes).
const SCHEMES: [(&str, bool); 2] = [("redis+sentinel://", false), ("rediss+sentinel://", true)];

/// A Sentinel-managed primary: where its sentinels are, the name they know it by, and how to
/// reach the data nodes and the sentinels, each with their own credentials and TLS. Its `Debug`
/// form hides both passwords.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct SentinelConfig {
    /// The sentinels, `host:port` (port 26379 when left out); any one that answers is enough.
    pub sentinels: Vec<String>,
    /// The name the sentinels know the primary by (`sentinel monitor <service> …`).
    pub service: String,
    /// The data nodes' user (ACL), if any.
    pub username: Option<String>,
    /// The data nodes' password, if any.
    pub password: Option<String>,
    /// The data nodes' database number.
    pub db: i64,
    /// Whether the data nodes speak TLS (the certificates are [`crate::RedisConfig::tls`]).
    pub tls: bool,
    /// The sentinels' user, if any (their ACL is separate from the data nodes').
    pub sentinel_username: Option<String>,
    /// The sentinels' password, if any.
    pub sentinel_password: Option<String>,
    /// `Some`: the sentinels speak TLS, trusting this material (separate from the data nodes').
    pub sentinel_tls: Option<TlsConfig>,
}

impl std::fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |secret: &Option<String>| secret.as_ref().map(|_| "***");
        f.debug_struct("SentinelConfig")
            .field("sentinels", &self.sentinels)
            .field("service", &self.service)
            .field("username", &hidden(&self.username))
            .field("password", &hidden(&self.password))
            .field("db", &self.db)
            .field("tls", &self.tls)
            .field("sentinel_username", &hidden(&self.sentinel_username))
            .field("sentinel_password", &hidden(&self.sentinel_password))
            .field("sentinel_tls", &self.sentinel_tls)
            .finish()
    }
}

impl SentinelConfig {
    /// The primary `service` behind `sentinels`, with no credentials, database 0, no TLS.
    pub fn new(sentinels: Vec<String>, service: String) -> SentinelConfig {
        SentinelConfig { sentinels, service, ..SentinelConfig::default() }
    }

    /// True for a `redis+sentinel://` or `rediss+sentinel://` URL.
    pub fn is_sentinel_url(url: &str) -> bool {
        SCHEMES.iter().any(|(scheme, _)| url.starts_with(scheme))
    }

    /// Reads `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]`
    /// (`rediss+sentinel://`: the data nodes speak TLS). The user and password are the data
    /// nodes' (percent-encoded, as in a `redis://` URL); the sentinels' are set on the fields.
    pub fn from_url(url: &str) -> Result<SentinelConfig> {
        let bad = |why: &str| Error::invalid("url", format!("{why}, in {:?}", super::redact::redact_url(url)));
        let form = "expected redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]";
        let Some((scheme, tls)) = SCHEMES.iter().find(|(scheme, _)| url.starts_with(scheme)) else {
            return Err(bad(form));
        };
        let rest = &url[scheme.len()..];
        // The last `@` ends the credentials: a raw password may hold `/`, `:` or `@`.
        let (auth, rest) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').ok_or_else(|| bad(&format!("no service name: {form}")))?;
        let mut path = path.splitn(2, '/');
        let service = path.next().unwrap_or_default();
        let db = match path.next().filter(|db| !db.is_empty()) {
            Some(db) => db.parse::<i64>().map_err(|_| bad("the database is not a number"))?,
            None => 0,
        };
        let mut config = SentinelConfig::new(
            hosts.split(',').map(|h| h.trim().to_owned()).collect(),
            percent_decode(service).ok_or_else(|| bad("the service name is not valid percent-encoding"))?,
        );
        config.db = db;
        config.tls = *tls;
        if let Some(auth) = auth {
            let (user, password) = match auth.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (auth, None),
            };
            let decode =
                |s: &str| percent_decode(s).ok_or_else(|| bad("the credentials are not valid percent-encoding"));
            config.username = Some(decode(user)?).filter(|u| !u.is_empty());
            config.password = password.map(decode).transpose()?;
        }
        Ok(config)
    }

    /// The URL form without credentials, for messages and identity.
    pub(crate) fn display_url(&self) -> String {
        let scheme = if self.tls { SCHEMES[1].0 } else { SCHEMES[0].0 };
        format!("{scheme}{}/{}", self.sentinels.join(","), self.service)
    }

    /// Checks every field, naming the one at fault, before anything connects.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.sentinels.is_empty() {
            return Err(Error::invalid("sentinels", "at least one sentinel address (host:port) is required"));
        }
        for (i, address) in self.sentinels.iter().enumerate() {
            address_of(address).map_err(|why| Error::invalid_field(format!("sentinels[{i}]"), why))?;
        }
        if self.service.is_empty() || self.service.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid(
                "service",
                format!("must be the name the sentinels monitor (non-empty, no spaces), got {:?}", self.service),
            ));
        }
        if self.db < 0 {
            return Err(Error::invalid("db", format!("must be 0 or more, got {}", self.db)));
        }
        if let Some(tls) = &self.sentinel_tls {
            tls.validate()?;
        }
        Ok(())
    }

    /// What equal configurations share a connection set by (secrets included: kept in memory,
    /// never shown).
    pub(crate) fn identity(&self) -> String {
        let tls = self.sentinel_tls.as_ref().map(|t| (t.ca_cert_pem.clone(), t.client_cert_and_key_pem.clone()));
        format!(
            "{:?}",
            (
                &self.sentinels,
                &self.service,
                &self.username,
                &self.password,
                self.db,
                self.tls,
                &self.sentinel_username,
                &self.sentinel_password,
                tls
            )
        )
    }
}

/// Fills `config.sentinel` from a `redis+sentinel://` URL given as the server's URL, and
/// refuses a Sentinel configuration that is also a cluster's.
pub(crate) fn from_url_if_any(config: &mut super::config::RedisConfig) -> Result<()> {
    if config.sentinel.is_none() && config.urls.len() == 1 && SentinelConfig::is_sentinel_url(&config.urls[0]) {
        config.sentinel = Some(SentinelConfig::from_url(&config.urls[0])?);
    }
    if let Some(sentinel) = &config.sentinel {
        if config.cluster {
            return Err(Error::invalid("sentinel", "a Redis Cluster is not Sentinel-managed: give seeds or sentinels"));
        }
        sentinel.validate()?;
        // Shown in messages and compared for sharing: never the credentials.
        config.urls = vec![sentinel.display_url()];
    }
    Ok(())
}

/// `address` as a host and port (26379 when left out), or why it is not one.
fn address_of(address: &str) -> std::result::Result<(String, u16), String> {
    let (host, port) = match address.rsplit_once(':') {
        // `[::1]:26379`, or `host:port`; a bare IPv6 address has more than one colon.
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
            let port = port.parse::<u16>().ok().filter(|p| *p > 0);
            (host, port.ok_or_else(|| format!("{address:?} has no valid port (1 to 65535)"))?)
        }
        _ => (address, DEFAULT_SENTINEL_PORT),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return Err(format!("{address:?} is not host:port"));
    }
    Ok((host.to_owned(), port))
}

/// `%XX`-decoded `s`; `None` for a broken escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Why a connection could not be made: the data node's (or sentinel's) own failure, or the
/// sentinels' answer, already worded for the caller.
pub(crate) enum ConnectError {
    Redis(redis::RedisError),
    Sentinel(Error),
}

impl From<redis::RedisError> for ConnectError {
    fn from(e: redis::RedisError) -> Self {
        ConnectError::Redis(e)
    }
}

/// One sentinel: its address as configured (for messages) and how to reach it.
struct Sentinel {
    address: String,
    target: Option<SyncTarget>,
}

/// A data node's address and its sync target.
type NodeTarget = ((String, u16), Arc<SyncTarget>);

/// How the connections of a [`SentinelConfig`] find the primary.
pub(crate) struct SentinelRoute {
    service: String,
    sentinels: Vec<Sentinel>,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
    /// The data nodes' credentials and database.
    node: RedisConnectionInfo,
    /// `Some`: the data nodes speak TLS, trusting this material (`None` inside: system roots).
    node_tls: Option<Option<TlsConfig>>,
    /// The sync target of the primary last connected to, reused while the sentinels name it.
    node_target: Mutex<Option<NodeTarget>>,
}

impl SentinelRoute {
    /// The route of `config` (validated), with `node_tls` the data nodes' TLS material.
    pub(crate) fn new(config: &SentinelConfig, node_tls: Option<&TlsConfig>) -> Result<SentinelRoute> {
        config.validate()?;
        let mut sentinel_settings = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(user) = &config.sentinel_username {
            sentinel_settings = sentinel_settings.set_username(user);
        }
        if let Some(password) = &config.sentinel_password {
            sentinel_settings = sentinel_settings.set_password(password);
        }
        let mut sentinels = Vec::with_capacity(config.sentinels.len());
        for (i, address) in config.sentinels.iter().enumerate() {
            let (host, port) =
                address_of(address).map_err(|why| Error::invalid_field(format!("sentinels[{i}]"), why))?;
            let info = connection_info(host, port, config.sentinel_tls.is_some(), sentinel_settings.clone())?;
            let target = SyncTarget::new(&info, config.sentinel_tls.as_ref());
            if config.sentinel_tls.is_some() && target.is_none() {
                return Err(Error::invalid_field(format!("sentinels[{i}]"), "cannot be reached over TLS by that name"));
            }
            sentinels.push(Sentinel { address: address.clone(), target });
        }
        let mut node = RedisConnectionInfo::default().set_db(config.db);
        if let Some(user) = &config.username {
            node = node.set_username(user);
        }
        if let Some(password) = &config.password {
            node = node.set_password(password);
        }
        Ok(SentinelRoute {
            service: config.service.clone(),
            sentinels,
            preferred: AtomicUsize::new(0),
            node,
            node_tls: config.tls.then(|| node_tls.cloned()),
            node_target: Mutex::new(None),
        })
    }

    /// Where the connections go, for messages: the service and its sentinels, never a secret.
    pub(crate) fn describe(&self) -> String {
        let sentinels: Vec<&str> = self.sentinels.iter().map(|s| s.address.as_str()).collect();
        format!("the primary of service {:?} (sentinels {})", self.service, sentinels.join(", "))
    }

    /// True when the data nodes speak TLS.
    pub(crate) fn node_tls(&self) -> bool {
        self.node_tls.is_some()
    }

    /// The primary's address as the first sentinel that answers names it, by `until`. Each
    /// sentinel gets an equal share of the time left, so a hung one leaves time for the others.
    pub(crate) fn primary(&self, until: Instant) -> Result<(String, u16)> {
        let count = self.sentinels.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut tried = Vec::with_capacity(count);
        for n in 0..count {
            let i = (first + n) % count;
            let sentinel = &self.sentinels[i];
            let now = Instant::now();
            let left = until.saturating_duration_since(now);
            if left.is_zero() {
                tried.push(format!("{}: no time left", sentinel.address));
                continue;
            }
            let share = now + left / (count - n) as u32;
            match self.ask(sentinel, share) {
                Ok(address) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(address);
                }
                Err(why) => tried.push(format!("{}: {why}", sentinel.address)),
            }
        }
        Err(Error::BackendUnavailable {
            message: format!(
                "no sentinel named the primary of service {:?} (tried {}); are the sentinels running, and \
                 is {:?} the name in their `sentinel monitor` line?",
                self.service,
                tried.join("; "),
                self.service
            ),
        })
    }

    /// One sentinel's answer: the primary's host and port, or why there is none.
    fn ask(&self, sentinel: &Sentinel, until: Instant) -> std::result::Result<(String, u16), String> {
        let Some(target) = &sentinel.target else { return Err("not reachable with this configuration".into()) };
        // A socket timeout reads "Resource temporarily unavailable": say what it means.
        let why = |e: redis::RedisError| match super::evalsha::is_timeout(&e) {
            true => "did not answer in time".to_owned(),
            false => e.to_string(),
        };
        let mut conn = target.connect(until).map_err(why)?;
        let ask = redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.service).to_owned();
        let reply = conn.request(&ask, until).map_err(why)?;
        match reply.extract_error().map_err(|e| e.to_string())? {
            Value::Nil => Err(format!("does not monitor {:?}", self.service)),
            reply => {
                let (host, port): (String, u16) =
                    redis::from_redis_value(reply).map_err(|e| format!("answered oddly: {e}"))?;
                Ok((host, port))
            }
        }
    }

    /// A client of the data node at `host:port` (for the runtime's connections).
    pub(crate) fn node_client(&self, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
        let info = connection_info(host.to_owned(), port, self.node_tls.is_some(), self.node.clone())
            .map_err(|e| redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "address", e.to_string())))?;
        match &self.node_tls {
            Some(tls) => redis::Client::build_with_tls(
                info,
                super::connection::certificates(tls.as_ref().unwrap_or(&TlsConfig::default())),
            ),
            None => redis::Client::open(info),
        }
    }

    /// A connection of the calling thread to the primary, its role confirmed, all by `until`.
    pub(crate) fn connect_sync(&self, until: Instant) -> std::result::Result<SyncConnection, ConnectError> {
        let (host, port) = self.primary(until).map_err(ConnectError::Sentinel)?;
        let target = self.node_target(&host, port)?;
        let mut conn = target.connect(until)?;
        let role = conn.request(&redis::cmd("ROLE"), until)?;
        self.confirm_role(&role, &host, port).map_err(ConnectError::Sentinel)?;
        Ok(conn)
    }

    /// The sync target of the data node at `host:port`, made once per address in a row.
    fn node_target(&self, host: &str, port: u16) -> std::result::Result<Arc<SyncTarget>, ConnectError> {
        let mut cached = self.node_target.lock();
        if let Some((address, target)) = &*cached {
            if address.0 == host && address.1 == port {
                return Ok(target.clone());
            }
        }
        let info = connection_info(host.to_owned(), port, self.node_tls.is_some(), self.node.clone())
            .map_err(ConnectError::Sentinel)?;
        let target = SyncTarget::new(&info, self.node_tls.as_ref().and_then(Option::as_ref)).ok_or_else(|| {
            ConnectError::Sentinel(Error::BackendUnavailable {
                message: format!("the primary {host}:{port} of service {:?} cannot be reached over TLS", self.service),
            })
        })?;
        let target = Arc::new(target);
        *cached = Some(((host.to_owned(), port), target.clone()));
        Ok(target)
    }

    /// Ok when `role` (a `ROLE` reply) says primary; a replica (a failover under way, or a
    /// sentinel that has not caught up) is refused: no call is written to it.
    pub(crate) fn confirm_role(&self, role: &Value, host: &str, port: u16) -> Result<()> {
        let is_primary = match role {
            Value::Array(parts) => {
                matches!(parts.first(), Some(Value::BulkString(b)) if b == b"master")
                    || matches!(parts.first(), Some(Value::SimpleString(s)) if s == "master")
            }
            _ => false,
        };
        if is_primary {
            return Ok(());
        }
        Err(Error::BackendUnavailable {
            message: format!(
                "the sentinels name {host}:{port} as the primary of service {:?}, but it is not a primary \
                 (ROLE answered {role:?}); a failover is under way or a sentinel is behind",
                self.service
            ),
        })
    }
}

/// The connection info of `host:port` (TLS or not) with `settings`.
fn connection_info(host: String, port: u16, tls: bool, settings: RedisConnectionInfo) -> Result<ConnectionInfo> {
    let addr = if tls {
        ConnectionAddr::TcpTls { host, port, insecure: false, tls_params: None }
    } else {
        ConnectionAddr::Tcp(host, port)
    };
    let info = addr.into_connection_info().map_err(|e| Error::invalid("sentinels", e.to_string()))?;
    Ok(info.set_redis_settings(settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_form_names_sentinels_service_db_and_the_nodes_credentials() {
        let config = SentinelConfig::from_url("redis+sentinel://u:p%40ss@h1:26380,h2/mymaster/3").unwrap();
        assert_eq!(config.sentinels, ["h1:26380", "h2"]);
        assert_eq!(config.service, "mymaster");
        assert_eq!((config.username.as_deref(), config.password.as_deref()), (Some("u"), Some("p@ss")));
        assert_eq!((config.db, config.tls), (3, false));
        assert!(config.validate().is_ok());
        assert_eq!(address_of("h2").unwrap(), ("h2".to_owned(), 26379));
        let tls = SentinelConfig::from_url("rediss+sentinel://:secret@[::1]:5000/s").unwrap();
        assert!(tls.tls && tls.username.is_none() && tls.password.as_deref() == Some("secret"));
        assert_eq!(address_of("[::1]:5000").unwrap(), ("::1".to_owned(), 5000));
        assert!(!format!("{tls:?}").contains("secret"));
    }

    fn parameter(result: Result<SentinelConfig>) -> String {
        match result.and_then(|c| c.validate().map(|_| c)) {
            Err(Error::InvalidArgument { parameter, message }) => {
                assert!(!message.contains("secret"), "{message}");
                parameter.into_owned()
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    /// Only a server whose ROLE says primary is used: a replica (a failover under way, a
    /// sentinel behind) is refused, naming the service and no password.
    #[test]
    fn a_replica_named_as_primary_is_refused() {
        let mut config = SentinelConfig::from_url("redis+sentinel://:secret@127.0.0.1:1/svc").unwrap();
        config.sentinel_password = Some("secret2".into());
        let route = SentinelRoute::new(&config, None).unwrap();
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert!(route
            .confirm_role(&Value::Array(vec![bulk("master"), Value::Int(0), Value::Array(vec![])]), "h", 1)
            .is_ok());
        let replica = Value::Array(vec![bulk("slave"), bulk("h"), Value::Int(2), bulk("connected"), Value::Int(0)]);
        let error = route.confirm_role(&replica, "h", 1).expect_err("a replica").to_string();
        assert!(error.contains("\"svc\"") && error.contains("h:1") && !error.contains("secret"), "{error}");
        assert!(!route.describe().contains("secret") && route.describe().contains("127.0.0.1:1"));
    }

    #[test]
    fn bad_urls_and_fields_are_refused_naming_the_parameter_and_no_password() {
        assert_eq!(parameter(SentinelConfig::from_url("redis+sentinel://u:secret@h1:1")), "url");
        assert_eq!(parameter(SentinelConfig::from_url("redis+sentinel://u:secret@h1:1/s/x")), "url");
        assert_eq!(parameter(SentinelConfig::from_url("redis+sentinel://h1:99999/s")), "sentinels[0]");
        assert_eq!(parameter(SentinelConfig::from_url("redis+sentinel://h1,:1/s")), "sentinels[1]");
        assert_eq!(parameter(SentinelConfig::from_url("redis+sentinel://h1/")), "service");
        assert_eq!(parameter(Ok(SentinelConfig::new(vec![], "s".into()))), "sentinels");
    }
}
