//! Connections to Redis: one shared multiplexed connection (or cluster connection) per URL set
//! in the process, established in the background so that no caller's deadline can cancel it,
//! replaced when it breaks, and a pool of dedicated connections for blocking commands (a BLPOP
//! on the shared connection would stall every other call).
//!
//! Calls made while others are in flight on a standalone server are written together: see
//! [`Connections::query`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};
use tokio::sync::{oneshot, Notify};

use super::config::{RedisConfig, TlsConfig};
use super::evalsha;
use super::sentinel::{ConnectError, SentinelRoute};
use super::sync_client::{SyncConnection, SyncTarget};
use crate::error::{Error, Result};
use crate::runtime::{forked_since, runtime};

/// How often the shared standalone connection is pinged, so that a server restart while the
/// process is idle is noticed before the next call rather than by it (a multiplexed connection
/// never reconnects on its own, and replaying a call whose connection broke could count it twice).
const WATCHDOG_INTERVAL: Duration = Duration::from_millis(250);

/// Dedicated connections kept for reuse: one per waiter blocked at once, up to this many.
const MAX_POOLED_DEDICATED: usize = 1024;

/// Direct connections kept for reuse: one per thread making blocking calls at once, up to this.
const MAX_POOLED_DIRECT: usize = 256;

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

// One per connection set, for the life of the process: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
    /// A Sentinel-managed primary: each connection goes where the sentinels name it then.
    Sentinel(Arc<SentinelRoute>),
}

#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    /// Bumped at every new connection, so a failure reported on an old one does not drop a new one.
    generation: u64,
    connecting: bool,
    /// The last failed connect, unless it timed out: calls fail fast for [`RECONNECT_BACKOFF`]
    /// after a refusal, but a server that accepts and does not answer makes every call wait for
    /// it until its own deadline, as a connected hung server does (one outcome: `Timeout`).
    last_failure: Option<(Instant, Error)>,
}

/// The connection set of one URL set.
pub(crate) struct Connections {
    client: Client,
    connect_timeout: Duration,
    /// This process's connections and their locks (see [`Connections::local`]): owned, freed
    /// with the set; a forked child replaces it and leaks its parent's.
    local: AtomicPtr<Local>,
    /// Where blocking calls connect on their own thread; `None` sends them through the runtime.
    sync_target: Option<SyncTarget>,
    /// Where the connections go, for error messages (see [`servers_of`]).
    servers: String,
    /// How many replicas acknowledge each writing call (see [`RedisConfig::replica_acks`]).
    replica_acks: u32,
}

/// What one process holds of a connection set. A forked child must not use its parent's: the
/// connections belong to the parent's runtime threads and share its sockets, and a lock may
/// have been held by a parent thread at the moment of the fork, which the child does not have
/// and which would never release it.
struct Local {
    /// The process this belongs to.
    pid: u32,
    slot: Mutex<Slot>,
    ready: Notify,
    blocking_pool: Mutex<Vec<Conn>>,
    /// Calls sent on the shared connection (or queued for it) and not yet answered.
    in_flight: AtomicUsize,
    /// Calls waiting to be written together by the next [`flush`].
    queue: Mutex<Vec<Queued>>,
    sync_pool: Mutex<Vec<SyncConnection>>,
    /// The last failed sync connect: calls fail fast for [`RECONNECT_BACKOFF`] after it.
    sync_failure: Mutex<Option<(Instant, Error)>>,
}

impl Local {
    fn new(pid: u32) -> Local {
        Local {
            pid,
            slot: Mutex::new(Slot::default()),
            ready: Notify::new(),
            blocking_pool: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            queue: Mutex::new(Vec::new()),
            sync_pool: Mutex::new(Vec::new()),
            sync_failure: Mutex::new(None),
        }
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        // SAFETY: `local` always points to a `Local` made by `Box::into_raw` that only this set
        // owns (a replaced one is leaked, never freed), and `&mut self` means no reference
        // handed out by [`Connections::local`] is alive.
        drop(unsafe { Box::from_raw(*self.local.get_mut()) });
    }
}

/// A call waiting in [`Connections::queue`].
struct Queued {
    cmd: Cmd,
    until: tokio::time::Instant,
    reply: oneshot::Sender<redis::RedisResult<Value>>,
}

/// Counts a call in [`Connections::in_flight`] until it completes or is dropped.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Identity of a connection set: equal configurations share one.
#[derive(Hash, PartialEq, Eq, Clone)]
struct SetKey {
    urls: Vec<String>,
    cluster: bool,
    ca: Option<Vec<u8>>,
    client_cert: Option<(Vec<u8>, Vec<u8>)>,
    connect_timeout: Duration,
    /// A Sentinel configuration's identity (see [`super::sentinel::SentinelConfig::identity`]).
    sentinel: Option<String>,
    replica_acks: u32,
}

/// Writes every queued call as one pipeline and hands each caller its own reply. Calls of the
/// same script travel as batches (see [`evalsha::batch`]): one script invocation for many calls.
async fn flush(connections: Arc<Connections>, mut conn: MultiplexedConnection) {
    // Let the tasks that are ready to run (typically the callers just answered, making their
    // next call) queue theirs first.
    tokio::task::yield_now().await;
    let queued = std::mem::take(&mut *connections.local().queue.lock());
    drop(connections);
    // A caller that gave up (deadline, cancellation) is not sent, as the multiplexed
    // connection does for its own requests.
    let live: Vec<Queued> = queued.into_iter().filter(|call| !call.reply.is_closed()).collect();
    let Some(until) = live.iter().map(|call| call.until).max() else { return };
    // Each pipeline entry answers the callers listed for it: one, or a batch in call order.
    let mut entries: Vec<Vec<oneshot::Sender<redis::RedisResult<Value>>>> = Vec::new();
    let mut pipe = Pipeline::with_capacity(live.len());
    let mut by_script: Vec<(Option<ScriptId>, Vec<Queued>)> = Vec::new();
    for call in live {
        let sha = script_of(&call.cmd);
        let batchable = |(s, group): &&mut (Option<ScriptId>, Vec<Queued>)| {
            sha.is_some() && *s == sha && group.len() < evalsha::MAX_BATCH
        };
        match by_script.iter_mut().find(batchable) {
            Some((_, group)) => group.push(call),
            None => by_script.push((sha, vec![call])),
        }
    }
    for (_, group) in by_script {
        if group.len() == 1 {
            let call = group.into_iter().next().expect("one call");
            pipe.add_command(call.cmd);
            entries.push(vec![call.reply]);
        } else {
            pipe.add_command(evalsha::batch(&group.iter().map(|call| &call.cmd).collect::<Vec<_>>()));
            entries.push(group.into_iter().map(|call| call.reply).collect());
        }
    }
    // Bounded by the latest caller deadline: by then every caller has stopped waiting.
    let Ok(result) = tokio::time::timeout_at(until, conn.send_packed_commands(&pipe, 0, entries.len())).await else {
        return;
    };
    let broken = |message: &'static str| Err(redis::RedisError::from((redis::ErrorKind::Parse, message)));
    match result {
        Ok(values) if values.len() == entries.len() => {
            for (callers, value) in entries.into_iter().zip(values) {
                let mut callers = callers.into_iter();
                if callers.len() == 1 {
                    let _ = callers.next().expect("one caller").send(Ok(value));
                    continue;
                }
                match value {
                    Value::Array(replies) if replies.len() == callers.len() => {
                        for (reply, value) in callers.zip(replies) {
                            let _ = reply.send(Ok(value));
                        }
                    }
                    // The batch did not run (NOSCRIPT, LOADING, …): each caller sees why, and
                    // retries or falls back to EVAL on its own.
                    Value::ServerError(_) => {
                        for reply in callers {
                            let _ = reply.send(Ok(value.clone()));
                        }
                    }
                    _ => {
                        for reply in callers {
                            let _ = reply.send(broken("a batch of calls got an unexpected reply"));
                        }
                    }
                }
            }
        }
        Ok(_) => {
            for reply in entries.into_iter().flatten() {
                let _ = reply.send(broken("a pipeline of calls got an unexpected number of replies"));
            }
        }
        Err(e) => {
            for reply in entries.into_iter().flatten() {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// A script's SHA1 in hex, as EVALSHA names it.
type ScriptId = [u8; 40];

/// The script an EVALSHA names (`None` for any other command, which is never batched).
fn script_of(cmd: &Cmd) -> Option<ScriptId> {
    let mut args = cmd.args_iter();
    match (args.next(), args.next()) {
        (Some(redis::Arg::Simple(b"EVALSHA")), Some(redis::Arg::Simple(sha))) => sha.try_into().ok(),
        _ => None,
    }
}

/// Pings the shared connection of `generation` until it is replaced or the set is dropped, and
/// drops it from the set as soon as it is found broken.
async fn watch(connections: Weak<Connections>, mut conn: Conn, generation: u64) {
    loop {
        tokio::time::sleep(WATCHDOG_INTERVAL).await;
        let Some(set) = connections.upgrade() else { return };
        if set.local().slot.lock().generation != generation {
            return;
        }
        let ping = redis::cmd("PING");
        match tokio::time::timeout(WATCHDOG_INTERVAL * 4, ping.query_async::<()>(&mut conn)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() => {
                set.invalidate(generation);
                return;
            }
            // A slow or hung server: calls time out within their deadlines on their own.
            _ => {}
        }
    }
}

fn registry() -> &'static Mutex<HashMap<SetKey, Weak<Connections>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<SetKey, Weak<Connections>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn unavailable(message: impl Into<String>) -> Error {
    Error::BackendUnavailable { message: message.into() }
}

/// A failed connect as the error its calls return: a refusal of the handshake (a wrong
/// password, a user without permission) is the server's answer, reported as itself; a reply
/// that is not Redis's protocol means the URL names some other server; anything else means
/// Redis cannot be reached. `servers` names where it connected (see [`servers_of`]), so a new
/// user whose Redis is elsewhere learns which address was tried and how to change it.
fn connect_failure(e: &redis::RedisError, servers: &str) -> Error {
    match evalsha::redis_failure(e) {
        rejected @ Error::BackendRejected { .. } => rejected,
        _ if not_redis(e) => unavailable(format!(
            "{servers} answered, but not in Redis's protocol: this does not look like a Redis \
             server; is the port in the URL a Redis port (6379 by default) and not, say, an HTTP \
             one?"
        )),
        _ => unavailable(format!(
            "cannot connect to Redis at {servers}: {e}; is redis-server running there? To use \
             another server, pass its URL: redis://HOST:PORT (rediss:// for TLS)"
        )),
    }
}

/// True for a connect that got an answer, but not one in Redis's protocol (RESP): an HTTP
/// server answers `HTTP/1.1 400` or an HTML page.
fn not_redis(e: &redis::RedisError) -> bool {
    if e.kind() == redis::ErrorKind::Parse {
        return true;
    }
    // The sync client reports a malformed reply as an I/O error of kind `InvalidData`.
    let text = e.to_string();
    text.contains("protocol error") || text.contains("unexpected type byte")
}

/// `WAIT 0 0`: answered at once by a server that has WAIT (no replica needs to acknowledge).
fn wait_probe() -> Cmd {
    redis::cmd("WAIT").arg(0).arg(0).to_owned()
}

/// The error of a server that refused the `WAIT` probe: `replica_acks` cannot work there.
fn lacks_wait(e: &redis::RedisError) -> Error {
    Error::BackendRejected {
        code: e.code().unwrap_or("ERR").to_owned(),
        message: format!(
            "this server refuses WAIT ({e}), which replica_acks needs to know that replicas hold each \
             call's writes; use a server with WAIT, or set replica_acks to 0"
        ),
    }
}

/// A failed connect (see [`connect_failure`]); the sentinels' answer is worded already.
fn open_failure(e: ConnectError, servers: &str) -> Error {
    match e {
        ConnectError::Redis(e) => connect_failure(&e, servers),
        ConnectError::Sentinel(error) => error,
    }
}

/// The servers of `config` as `host:port` (comma-separated for a cluster's seeds), for error
/// messages: never the URL itself, which may carry a password.
fn servers_of(config: &RedisConfig) -> String {
    let server = |url: &String| match redis::Client::open(url.as_str()).map(|c| c.get_connection_info().addr().clone())
    {
        Ok(redis::ConnectionAddr::Tcp(host, port)) | Ok(redis::ConnectionAddr::TcpTls { host, port, .. }) => {
            format!("{host}:{port}")
        }
        Ok(redis::ConnectionAddr::Unix(path)) => path.display().to_string(),
        _ => "the configured server".to_owned(),
    };
    config.urls.iter().map(server).collect::<Vec<_>>().join(", ")
}

pub(crate) fn certificates(tls: &TlsConfig) -> TlsCertificates {
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
        let parameter = if config.cluster { "seeds" } else { "url" };
        if config.urls.is_empty() || config.urls.iter().any(|u| u.is_empty()) {
            return Err(Error::invalid(parameter, "at least one redis:// or rediss:// URL is required"));
        }
        let key = SetKey {
            urls: config.urls.clone(),
            cluster: config.cluster,
            ca: config.tls.as_ref().and_then(|t| t.ca_cert_pem.clone()),
            client_cert: config.tls.as_ref().and_then(|t| t.client_cert_and_key_pem.clone()),
            connect_timeout: config.connect_timeout,
            sentinel: config.sentinel.as_ref().map(|s| s.identity()),
            replica_acks: config.replica_acks,
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
        let sentinel_tls = config.sentinel.as_ref().is_some_and(|s| s.tls || s.sentinel_tls.is_some());
        if sentinel_tls || config.urls.iter().any(|u| u.starts_with("rediss://")) {
            // rustls needs one process-wide crypto provider; another library may have set it.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let bad_url =
            |e: redis::RedisError| Error::invalid(if config.cluster { "seeds" } else { "url" }, format!("{e}"));
        let client = if let Some(sentinel) = &config.sentinel {
            Client::Sentinel(Arc::new(SentinelRoute::new(sentinel, config.tls.as_ref())?))
        } else if config.cluster {
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
        let servers = match &client {
            Client::Sentinel(route) => route.describe(),
            _ => servers_of(config),
        };
        Ok(Connections {
            client,
            connect_timeout: config.connect_timeout,
            local: AtomicPtr::new(Box::into_raw(Box::new(Local::new(forked_since(0).0)))),
            sync_target: SyncTarget::for_config(config),
            servers,
            replica_acks: config.replica_acks,
        })
    }

    /// Opens a new connection. Neither kind has a response timeout: every call on the shared
    /// connection is bounded by its own deadline (a response timeout would add a second timer to
    /// every call), and the commands of dedicated connections (BLPOP) block on purpose, bounded
    /// by the caller.
    ///
    /// A Sentinel-managed primary is asked of the sentinels first (on a blocking thread: see
    /// [`super::sentinel`]), and the new connection confirms its role before it is used.
    async fn open(&self) -> std::result::Result<Conn, ConnectError> {
        let config =
            AsyncConnectionConfig::new().set_connection_timeout(Some(self.connect_timeout)).set_response_timeout(None);
        let mut conn = match &self.client {
            Client::Single(client) => Conn::Single(client.get_multiplexed_async_connection_with_config(&config).await?),
            Client::Cluster(client) => Conn::Cluster(client.get_async_connection().await?),
            Client::Sentinel(route) => {
                let (asking, until) = (route.clone(), Instant::now() + self.connect_timeout);
                let (host, port) = tokio::task::spawn_blocking(move || asking.primary(until))
                    .await
                    .map_err(|e| ConnectError::Sentinel(unavailable(format!("asking the sentinels failed: {e}"))))?
                    .map_err(ConnectError::Sentinel)?;
                let client = route.node_client(&host, port)?;
                let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
                let role: Value = redis::cmd("ROLE").query_async(&mut conn).await?;
                route.confirm_role(&role, &host, port).map_err(ConnectError::Sentinel)?;
                Conn::Single(conn)
            }
        };
        if self.replica_acks > 0 {
            let probe: redis::RedisResult<Value> = wait_probe().query_async(&mut conn).await;
            probe.and_then(|v| v.extract_error()).map_err(|e| ConnectError::Sentinel(lacks_wait(&e)))?;
        }
        Ok(conn)
    }

    /// The shared connection and its generation; starts a background connect when there is
    /// none. Callers bound the wait with their own deadline.
    pub(crate) async fn shared(self: &Arc<Self>) -> Result<(Conn, u64)> {
        // Fast path (every call while connected): one uncontended lock and a clone, without
        // registering for the `ready` notification.
        if let Some(found) = self.current() {
            return Ok(found);
        }
        loop {
            let notified = self.local().ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut slot = self.local().slot.lock();
                if let Some(conn) = &slot.conn {
                    return Ok((conn.clone(), slot.generation));
                }
                if let Some((at, error)) = &slot.last_failure {
                    if at.elapsed() < RECONNECT_BACKOFF {
                        return Err(error.clone());
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

    /// Sends `cmd` on `conn` (a clone of the shared connection) and returns its reply, unparsed.
    ///
    /// A call made while no other is in flight is written at once. Calls made while others are
    /// in flight on a standalone server are queued, and a task spawned by the first of them
    /// writes every call queued by then as one pipeline, after the tasks that are ready to run
    /// have run: many concurrent calls then cost the client and the server one write and one
    /// read instead of one each (the multiplexed connection alone would write each call
    /// separately, since tokio polls its driver right after each sender). Each call keeps its own
    /// reply, error and deadline; nothing is ever sent twice. Cluster connections route every
    /// call on their own and are never batched here.
    pub(crate) async fn query(
        self: &Arc<Self>,
        conn: &mut Conn,
        cmd: &Cmd,
        until: tokio::time::Instant,
    ) -> redis::RedisResult<Value> {
        let _in_flight = InFlight(&self.local().in_flight);
        let busy = self.local().in_flight.fetch_add(1, Ordering::Relaxed) > 0;
        let Conn::Single(single) = conn else {
            return conn.req_packed_command(cmd).await;
        };
        if !busy {
            return single.send_packed_command(cmd).await;
        }
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut queue = self.local().queue.lock();
            queue.push(Queued { cmd: cmd.clone(), until, reply });
            queue.len() == 1
        };
        if first {
            runtime().spawn(flush(self.clone(), single.clone()));
        }
        answer.await.unwrap_or_else(|_| {
            Err(redis::RedisError::from((redis::ErrorKind::Io, "the batched call was dropped before its reply")))
        })
    }

    /// The shared connection and its generation, if connected.
    #[inline]
    pub(crate) fn current(&self) -> Option<(Conn, u64)> {
        let slot = self.local().slot.lock();
        slot.conn.as_ref().map(|conn| (conn.clone(), slot.generation))
    }

    async fn connect(self: Arc<Self>) {
        // `None`: the attempt timed out (see [`Slot::last_failure`]).
        let result = match tokio::time::timeout(self.connect_timeout, self.open()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(ConnectError::Redis(e))) if evalsha::is_timeout(&e) => Err(None),
            Ok(Err(e)) => Err(Some(open_failure(e, &self.servers))),
            Err(_) => Err(None),
        };
        {
            let mut slot = self.local().slot.lock();
            slot.connecting = false;
            match result {
                Ok(conn) => {
                    slot.generation += 1;
                    slot.last_failure = None;
                    if let Conn::Single(_) = conn {
                        runtime().spawn(watch(Arc::downgrade(&self), conn.clone(), slot.generation));
                    }
                    slot.conn = Some(conn);
                }
                Err(message) => slot.last_failure = message.map(|m| (Instant::now(), m)),
            }
        }
        self.local().ready.notify_waiters();
    }

    /// This process's connections. In a forked child, the first call leaves the parent's behind
    /// (leaked: not closed, since a TLS close would write to a socket the parent still uses, and
    /// not locked, since a parent thread may have held a lock at the fork) and starts afresh, so
    /// the child connects on its own; the parent's keep working.
    #[inline]
    fn local(&self) -> &Local {
        let current = self.local.load(Ordering::Acquire);
        // SAFETY: `local` always points to a live `Local`: it is freed only when the set is
        // dropped, and a replaced one is leaked, so a reference outlives no pointee.
        let (pid, forked) = forked_since(unsafe { (*current).pid });
        if !forked {
            return unsafe { &*current };
        }
        let fresh = Box::into_raw(Box::new(Local::new(pid)));
        match self.local.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: as above; the parent's `Local` is leaked on purpose.
            Ok(_) => unsafe { &*fresh },
            Err(winner) => {
                // Another thread of the child replaced it first.
                // SAFETY: `fresh` was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                unsafe { &*winner }
            }
        }
    }

    /// Drops the shared connection of `generation` after a failure that may have broken it; the
    /// next call reconnects.
    pub(crate) fn invalidate(&self, generation: u64) {
        let mut slot = self.local().slot.lock();
        if slot.generation == generation {
            slot.conn = None;
        }
    }

    /// A dedicated connection for a blocking command; give it back with [`Self::give_back`]
    /// once its command has completed (a connection whose command was cancelled is dropped).
    pub(crate) async fn dedicated(&self) -> Result<Conn> {
        if let Some(conn) = self.local().blocking_pool.lock().pop() {
            return Ok(conn);
        }
        self.open().await.map_err(|e| open_failure(e, &self.servers))
    }

    /// Returns a dedicated connection to the pool.
    pub(crate) fn give_back(&self, conn: Conn) {
        let mut pool = self.local().blocking_pool.lock();
        if pool.len() < MAX_POOLED_DEDICATED {
            pool.push(conn);
        }
    }

    /// The [`Error::Timeout`] of a call to these servers that got no answer within `deadline`,
    /// naming them.
    pub(crate) fn timeout(&self, deadline: Duration) -> Error {
        Error::redis_timeout(deadline, &self.servers)
    }

    /// A connection for the calling thread to drive itself (see [`super::sync_client`]), connected
    /// by `until` (the end of the call's `deadline`); `None` where blocking calls go through the
    /// runtime instead (a cluster). Give it back with [`Self::give_back_sync`] after a call
    /// that left it in a clean state.
    ///
    /// The connect has the rest of the call's deadline, not the connect timeout (which bounds
    /// background connects, that no caller waits for): a server that accepts and does not
    /// answer then ends the call with `Timeout` at its deadline, as it does once connected.
    pub(crate) fn sync_connection(&self, until: Instant, deadline: Duration) -> Result<Option<SyncConnection>> {
        if self.sync_target.is_none() && !matches!(self.client, Client::Sentinel(_)) {
            return Ok(None);
        }
        // The call's start, without reading the clock again: `until` is it plus the deadline.
        let now = until.checked_sub(deadline).unwrap_or_else(Instant::now);
        loop {
            let Some(mut conn) = self.local().sync_pool.lock().pop() else { break };
            if conn.is_usable(now) {
                return Ok(Some(conn));
            }
        }
        if let Some((at, error)) = &*self.local().sync_failure.lock() {
            if at.elapsed() < RECONNECT_BACKOFF {
                return Err(error.clone());
            }
        }
        match self.connect_sync(until) {
            Ok(conn) => {
                *self.local().sync_failure.lock() = None;
                Ok(Some(conn))
            }
            // No back-off after a timeout: see [`Slot::last_failure`].
            Err(ConnectError::Redis(e)) if evalsha::is_timeout(&e) => Err(self.timeout(deadline)),
            Err(e) => {
                let error = open_failure(e, &self.servers);
                *self.local().sync_failure.lock() = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    /// A new sync connection by `until`: to the standalone server, or to the primary the
    /// sentinels name (its role confirmed). Only for a set with a sync target or a Sentinel.
    fn connect_sync(&self, until: Instant) -> std::result::Result<SyncConnection, ConnectError> {
        let mut conn = match (&self.client, &self.sync_target) {
            (Client::Sentinel(route), _) => route.connect_sync(until)?,
            (_, Some(target)) => target.connect(until)?,
            (_, None) => return Err(ConnectError::Sentinel(unavailable("no sync connection to this server"))),
        };
        if self.replica_acks > 0 {
            match conn.request(&wait_probe(), until).and_then(|v| v.extract_error()) {
                Ok(_) => {}
                Err(e) if evalsha::is_timeout(&e) || e.is_io_error() => return Err(ConnectError::Redis(e)),
                Err(e) => return Err(ConnectError::Sentinel(lacks_wait(&e))),
            }
        }
        Ok(conn)
    }

    /// Where the connections go, for messages (never a password).
    pub(crate) fn servers(&self) -> &str {
        &self.servers
    }

    /// How many replicas must acknowledge each writing call (0: none, no `WAIT`).
    pub(crate) fn replica_acks(&self) -> u32 {
        self.replica_acks
    }

    /// True when [`Self::connect_driven`] can connect: a plain standalone server, or a plain
    /// Sentinel-managed primary.
    pub(crate) fn drivable(&self) -> bool {
        // A call whose writes replicas acknowledge takes a connection of its own (see
        // [`evalsha::run_cmd`]): the event loop's one connection would wait behind each WAIT.
        if self.replica_acks > 0 {
            return false;
        }
        match &self.client {
            Client::Sentinel(route) => !route.node_tls(),
            _ => self.sync_target.as_ref().is_some_and(SyncTarget::is_plain),
        }
    }

    /// A new connection, handshaken, for a caller that drives it itself (see
    /// [`crate::driven`]); `None` unless [`Self::drivable`]. Each one goes to the primary the
    /// sentinels name at that moment: a driven connection follows a failover by reconnecting.
    pub(crate) fn connect_driven(&self) -> Option<Result<std::net::TcpStream>> {
        if !self.drivable() {
            return None;
        }
        let connected =
            self.connect_sync(Instant::now() + self.connect_timeout).and_then(|conn| Ok(conn.into_plain()?));
        Some(connected.map_err(|e| open_failure(e, &self.servers)))
    }

    /// Returns a sync connection to the pool.
    pub(crate) fn give_back_sync(&self, conn: SyncConnection) {
        let mut pool = self.local().sync_pool.lock();
        if pool.len() < MAX_POOLED_DIRECT {
            pool.push(conn);
        }
    }
}
