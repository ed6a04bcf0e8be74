//! Connections to Redis: one shared multiplexed connection (or cluster connection) per URL set
//! in the process, established in the background so that no caller's deadline can cancel it,
//! replaced when it breaks, and a pool of dedicated connections for blocking commands (a BLPOP
//! on the shared connection would stall every other call).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};
use tokio::sync::Notify;

use super::config::{RedisConfig, TlsConfig};
use crate::error::{Error, Result};
use crate::runtime::runtime;

/// After a failed connect, calls fail fast for this long before the next attempt, so a dead
/// server costs callers nothing while recovery is still noticed within a fraction of a second.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// A connection of either kind; cheap to clone (both are handles to a shared pipeline).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
}

#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    /// Bumped at every new connection, so a failure reported on an old one does not drop a new one.
    generation: u64,
    connecting: bool,
    last_failure: Option<(Instant, String)>,
}

/// The connection set of one URL set.
pub(crate) struct Connections {
    client: Client,
    connect_timeout: Duration,
    slot: Mutex<Slot>,
    ready: Notify,
    blocking_pool: Mutex<Vec<Conn>>,
}

/// Identity of a connection set: equal configurations share one.
#[derive(Hash, PartialEq, Eq, Clone)]
struct SetKey {
    urls: Vec<String>,
    cluster: bool,
    ca: Option<Vec<u8>>,
    client_cert: Option<(Vec<u8>, Vec<u8>)>,
    connect_timeout: Duration,
}

fn registry() -> &'static Mutex<HashMap<SetKey, Weak<Connections>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<SetKey, Weak<Connections>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn unavailable(message: impl Into<String>) -> Error {
    Error::BackendUnavailable { message: message.into() }
}

fn certificates(tls: &TlsConfig) -> TlsCertificates {
    TlsCertificates {
        client_tls: tls
            .client_cert_and_key_pem
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
        root_cert: tls.ca_cert_pem.clone(),
    }
}

impl Connections {
    /// The process-wide connection set for `config`'s servers, created on first use. Nothing
    /// connects here: connections are established lazily, in the background.
    pub(crate) fn for_config(config: &RedisConfig) -> Result<Arc<Connections>> {
        if config.urls.is_empty() || config.urls.iter().any(|u| u.is_empty()) {
            return Err(Error::invalid("url", "at least one redis:// or rediss:// URL is required"));
        }
        let key = SetKey {
            urls: config.urls.clone(),
            cluster: config.cluster,
            ca: config.tls.as_ref().and_then(|t| t.ca_cert_pem.clone()),
            client_cert: config.tls.as_ref().and_then(|t| t.client_cert_and_key_pem.clone()),
            connect_timeout: config.connect_timeout,
        };
        let mut registry = registry().lock();
        if let Some(existing) = registry.get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let connections = Arc::new(Connections::new(config)?);
        registry.retain(|_, weak| weak.strong_count() > 0);
        registry.insert(key, Arc::downgrade(&connections));
        Ok(connections)
    }

    fn new(config: &RedisConfig) -> Result<Connections> {
        if config.urls.iter().any(|u| u.starts_with("rediss://")) {
            // rustls needs one process-wide crypto provider; another library may have set it.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let bad_url = |e: redis::RedisError| Error::invalid("url", format!("{e}"));
        let client = if config.cluster {
            let mut builder = ClusterClientBuilder::new(config.urls.clone())
                .connection_timeout(config.connect_timeout)
                .response_timeout(Duration::from_secs(24 * 3600))
                // Never let the client replay a call whose reply was lost: redirects and
                // "try again" answers (which prove the script did not run) are retried by us.
                .retries(0);
            if let Some(tls) = &config.tls {
                builder = builder.certs(certificates(tls));
            }
            Client::Cluster(builder.build().map_err(bad_url)?)
        } else {
            let url = config.urls[0].as_str();
            match &config.tls {
                Some(tls) => Client::Single(redis::Client::build_with_tls(url, certificates(tls)).map_err(bad_url)?),
                None => Client::Single(redis::Client::open(url).map_err(bad_url)?),
            }
        };
        Ok(Connections {
            client,
            connect_timeout: config.connect_timeout,
            slot: Mutex::new(Slot::default()),
            ready: Notify::new(),
            blocking_pool: Mutex::new(Vec::new()),
        })
    }

    /// Opens a new connection. `for_blocking` connections have no response timeout: their
    /// commands (BLPOP) block on purpose, bounded by the caller.
    async fn open(&self, for_blocking: bool) -> redis::RedisResult<Conn> {
        match &self.client {
            Client::Single(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(if for_blocking { None } else { Some(Duration::from_secs(24 * 3600)) });
                Ok(Conn::Single(client.get_multiplexed_async_connection_with_config(&config).await?))
            }
            Client::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
        }
    }

    /// The shared connection and its generation; starts a background connect when there is
    /// none. Callers bound the wait with their own deadline.
    pub(crate) async fn shared(self: &Arc<Self>) -> Result<(Conn, u64)> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut slot = self.slot.lock();
                if let Some(conn) = &slot.conn {
                    return Ok((conn.clone(), slot.generation));
                }
                if let Some((at, message)) = &slot.last_failure {
                    if at.elapsed() < RECONNECT_BACKOFF {
                        return Err(unavailable(format!("cannot connect to Redis: {message}")));
                    }
                }
                if !slot.connecting {
                    slot.connecting = true;
                    let this = self.clone();
                    runtime().spawn(async move { this.connect().await });
                }
            }
            notified.await;
        }
    }

    async fn connect(self: Arc<Self>) {
        let result = match tokio::time::timeout(self.connect_timeout, self.open(false)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("connect timed out after {:?}", self.connect_timeout)),
        };
        {
            let mut slot = self.slot.lock();
            slot.connecting = false;
            match result {
                Ok(conn) => {
                    slot.conn = Some(conn);
                    slot.generation += 1;
                    slot.last_failure = None;
                }
                Err(message) => slot.last_failure = Some((Instant::now(), message)),
            }
        }
        self.ready.notify_waiters();
    }

    /// Drops the shared connection of `generation` after a failure that may have broken it; the
    /// next call reconnects.
    pub(crate) fn invalidate(&self, generation: u64) {
        let mut slot = self.slot.lock();
        if slot.generation == generation {
            slot.conn = None;
        }
    }

    /// A dedicated connection for a blocking command; give it back with [`Self::give_back`]
    /// once its command has completed (a connection whose command was cancelled is dropped).
    pub(crate) async fn dedicated(&self) -> Result<Conn> {
        if let Some(conn) = self.blocking_pool.lock().pop() {
            return Ok(conn);
        }
        self.open(true).await.map_err(|e| unavailable(format!("cannot connect to Redis: {e}")))
    }

    /// Returns a dedicated connection to the pool.
    pub(crate) fn give_back(&self, conn: Conn) {
        let mut pool = self.blocking_pool.lock();
        if pool.len() < 64 {
            pool.push(conn);
        }
    }
}
