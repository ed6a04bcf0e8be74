//! How to reach Redis and what to do when it does not answer.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::redact::redact_url;
use crate::clock::Clock;
use crate::error::{Error, Result};

use crate::defaults::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEADLINE, DEFAULT_DENY_CACHE_MAX_ENTRIES, DEFAULT_PREFIX};

/// What a process does when it builds a limiter whose spec differs from the one live processes
/// use under the same name on the same Redis (one name, two limits: each would enforce its own
/// number on the shared counter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnConflict {
    /// Build it, say so once on stderr (naming both specs and who uses each), count it in the
    /// limiter's `spec_conflicts` and show it in the registry (`limits`, `inspect`, the page).
    #[default]
    Warn,
    /// Refuse to build it: the constructor reads the registry (one round trip) and fails with an
    /// invalid-argument error naming `spec` when a live process uses another spec.
    Raise,
}

impl OnConflict {
    /// Reads `"warn"` or `"raise"`; anything else is an invalid-argument error naming `parameter`.
    pub fn from_name(parameter: &'static str, name: &str) -> crate::Result<OnConflict> {
        match name {
            "warn" => Ok(OnConflict::Warn),
            "raise" => Ok(OnConflict::Raise),
            other => Err(crate::Error::invalid(parameter, format!("must be \"warn\" or \"raise\", got {other:?}"))),
        }
    }
}

/// What a limiter does when Redis cannot answer within the deadline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Fail the call with [`crate::Error::BackendUnavailable`] or [`crate::Error::Timeout`] —
    /// distinct from over-limit (the default).
    #[default]
    FailClosed,
    /// Allow the call and count it in [`crate::BackendStats::failed_open`].
    FailOpen,
    /// An in-process memory limiter takes over with `1/divisor` of the limit (for example the
    /// number of processes sharing it); counted in [`crate::BackendStats::fell_back`].
    Fallback {
        /// What to divide limits, capacities and rates by (at least 1).
        divisor: u32,
    },
}

/// PEM material for `rediss://` connections.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct TlsConfig {
    /// The CA certificate(s) that signed the server's certificate; `None` uses the system store.
    pub ca_cert_pem: Option<Vec<u8>>,
    /// A client certificate and key for mutual TLS.
    pub client_cert_and_key_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_cert_pem", &self.ca_cert_pem.as_ref().map(Vec::len))
            .field("client_cert_and_key_pem", &self.client_cert_and_key_pem.is_some())
            .finish()
    }
}

impl TlsConfig {
    /// Trust the CA certificate(s) in `pem` (instead of the system store).
    pub fn with_ca_pem(pem: impl Into<Vec<u8>>) -> Self {
        TlsConfig { ca_cert_pem: Some(pem.into()), client_cert_and_key_pem: None }
    }

    /// Parses the PEM material before anything connects, naming the part at fault (`tls.ca`,
    /// `tls.cert`, `tls.key`). Left to the first connection, bad material would only show as a
    /// failed connection — which a fail-open backend turns into admitting every call.
    pub fn validate(&self) -> Result<()> {
        if let Some(pem) = &self.ca_cert_pem {
            let certificates = CertificateDer::pem_slice_iter(pem)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::invalid_field("tls.ca", format!("is not valid PEM: {e}")))?;
            if certificates.is_empty() {
                return Err(Error::invalid_field("tls.ca", "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
            }
            let mut roots = rustls::RootCertStore::empty();
            for certificate in certificates {
                roots
                    .add(certificate)
                    .map_err(|e| Error::invalid_field("tls.ca", format!("holds a certificate rustls refuses: {e}")))?;
            }
        }
        if let Some((cert, key)) = &self.client_cert_and_key_pem {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::invalid_field("tls.cert", format!("is not valid PEM: {e}")))?;
            if chain.is_empty() {
                return Err(Error::invalid_field("tls.cert", "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
            }
            PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| Error::invalid_field("tls.key", format!("holds no PEM private key: {e}")))?;
        }
        Ok(())
    }
}

pub use super::sentinel::SentinelConfig;

/// Configuration of a Redis or Redis Cluster backend. Its `Debug` form hides the user and
/// password of every URL (see [`super::redact::redact_url`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` or `rediss://…`; one URL for a standalone
    /// server, or the seed nodes of a cluster.
    pub urls: Vec<String>,
    /// Whether `urls` are Redis Cluster seed nodes.
    pub cluster: bool,
    /// Namespace of every key (default `rk`).
    pub prefix: String,
    /// What calls do when Redis does not answer (default [`FailurePolicy::FailClosed`]).
    pub failure_policy: FailurePolicy,
    /// Every call returns within this, answered or not (default 200 ms).
    pub deadline: Duration,
    /// Time allowed to establish a connection in the background (default 1 s).
    pub connect_timeout: Duration,
    /// Certificates for `rediss://` URLs.
    pub tls: Option<TlsConfig>,
    /// Where time comes from: `None` (default) uses the Redis server's `TIME`, so client clocks do
    /// not matter; a manual clock sends its time with every call (tests and vectors).
    pub clock: Option<Arc<dyn Clock>>,
    /// Whether limiters remember refusals in process (the deny cache; default `false`): after
    /// a refusal with `retry_after` R, a check of the same limiter and key with at least the
    /// refused cost is refused locally until R has passed, with no round trip. A limiter may
    /// say otherwise ([`crate::Limiter::with_deny_cache`]).
    pub deny_cache: bool,
    /// The most refusals the deny cache holds (default [`DEFAULT_DENY_CACHE_MAX_ENTRIES`]).
    pub deny_cache_max_entries: usize,
    /// What building a limiter whose spec differs from the live processes' does (default
    /// [`OnConflict::Warn`]).
    pub on_conflict: OnConflict,
    /// A Sentinel-managed primary, found through its sentinels (see [`RedisConfig::sentinel`]);
    /// `None` for a standalone server or a cluster. A `redis+sentinel://` URL in `urls` fills it.
    pub sentinel: Option<SentinelConfig>,
    /// How many replicas must acknowledge each call's writes (`WAIT`) before its decision
    /// admits (default 0: no waiting). See the backends page for what it guarantees.
    pub replica_acks: u32,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|url| redact_url(url)).collect();
        f.debug_struct("RedisConfig")
            .field("urls", &urls)
            .field("cluster", &self.cluster)
            .field("prefix", &self.prefix)
            .field("failure_policy", &self.failure_policy)
            .field("deadline", &self.deadline)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .field("clock", &self.clock)
            .field("deny_cache", &self.deny_cache)
            .field("deny_cache_max_entries", &self.deny_cache_max_entries)
            .field("on_conflict", &self.on_conflict)
            .field("sentinel", &self.sentinel)
            .field("replica_acks", &self.replica_acks)
            .finish()
    }
}

impl RedisConfig {
    /// A standalone server.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            urls: vec![url.into()],
            cluster: false,
            prefix: DEFAULT_PREFIX.into(),
            failure_policy: FailurePolicy::default(),
            deadline: DEFAULT_DEADLINE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tls: None,
            clock: None,
            deny_cache: false,
            deny_cache_max_entries: DEFAULT_DENY_CACHE_MAX_ENTRIES,
            on_conflict: OnConflict::Warn,
            sentinel: None,
            replica_acks: 0,
        }
    }

    /// A Sentinel-managed primary named `service`, found through any of `sentinels`
    /// (`host:port`, port 26379 when left out). Set the data nodes' credentials, database and
    /// TLS, and the sentinels' own, on [`RedisConfig::sentinel`]'s fields; the URL form
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]` (given to
    /// [`RedisConfig::new`]) does the same.
    pub fn sentinel<S: Into<String>>(sentinels: impl IntoIterator<Item = S>, service: impl Into<String>) -> Self {
        let sentinel = SentinelConfig::new(sentinels.into_iter().map(Into::into).collect(), service.into());
        let mut config = RedisConfig::new(sentinel.display_url());
        config.sentinel = Some(sentinel);
        config
    }

    /// Sets how many replicas must acknowledge each call's writes (see
    /// [`RedisConfig::replica_acks`]).
    pub fn replica_acks(mut self, replicas: u32) -> Self {
        self.replica_acks = replicas;
        self
    }

    /// A Redis Cluster reached through any of `seeds`.
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Self {
        let mut config = RedisConfig::new(String::new());
        config.urls = seeds.into_iter().map(Into::into).collect();
        config.cluster = true;
        config
    }

    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the failure policy.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure_policy = policy;
        self
    }

    /// Sets the per-call deadline.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets TLS material for `rediss://` URLs.
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets what building a limiter whose spec differs from the live processes' does (see
    /// [`OnConflict`]).
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = on_conflict;
        self
    }

    /// Turns the deny cache on or off for the backend's limiters (see [`RedisConfig::deny_cache`]).
    pub fn deny_cache(mut self, on: bool) -> Self {
        self.deny_cache = on;
        self
    }

    /// Sets the most refusals the deny cache holds (at least 1).
    pub fn deny_cache_max_entries(mut self, max_entries: usize) -> Self {
        self.deny_cache_max_entries = max_entries;
        self
    }

    /// Uses `clock` instead of the server's time (tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parameter(tls: TlsConfig) -> String {
        match tls.validate() {
            Err(Error::InvalidArgument { parameter, .. }) => parameter.into_owned(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn pem_material_that_is_not_pem_is_refused_naming_its_part() {
        assert_eq!(parameter(TlsConfig::with_ca_pem("not a certificate")), "tls.ca");
        assert_eq!(parameter(TlsConfig::with_ca_pem("")), "tls.ca");
        let broken = "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
        assert_eq!(parameter(TlsConfig::with_ca_pem(broken)), "tls.ca");
        let client = TlsConfig {
            client_cert_and_key_pem: Some((b"not a certificate".to_vec(), b"not a key".to_vec())),
            ..TlsConfig::default()
        };
        assert_eq!(parameter(client), "tls.cert");
        assert!(TlsConfig::default().validate().is_ok(), "no material: the system's roots");
    }

    #[test]
    fn debug_hides_every_urls_password() {
        let shown = format!("{:?}", RedisConfig::cluster(["redis://u:SECRET1@a:1", "redis://:SECRET2@b:2"]));
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("redis://***@a:1") && shown.contains("redis://***@b:2"), "{shown}");
    }
}
