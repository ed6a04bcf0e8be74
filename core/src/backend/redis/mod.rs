//! The Redis and Redis Cluster backend: every limiter is one atomic Lua script per call, time
//! comes from the server's `TIME`, every key carries a TTL, and a failure policy decides what a
//! call does when Redis cannot answer within the per-call deadline.

pub(crate) mod check_all;
pub(crate) mod cleared;
pub(crate) mod config;
pub(crate) mod connection;
pub(crate) mod deny_cache;
pub mod driven;
pub(crate) mod evalsha;
pub(crate) mod keys;
pub(crate) mod leased_blocks;
pub(crate) mod live;
pub(crate) mod partitions;
pub(crate) mod redact;
pub(crate) mod resolve;
pub(crate) mod resp;
mod seal;
pub(crate) mod sentinel;
mod spec_conflicts;
pub(crate) mod sync_client;
mod views;
pub(crate) use check_all::RedisPart;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use config::{FailurePolicy, RedisConfig};
pub(crate) use connection::Connections;
use keys::{validate_prefix, KeyBuilder};
use redis::Cmd;

use super::memory::{MemoryBackend, MemoryConfig};
use crate::clock::Clock;
use crate::decision::{Decision, Lease};
use crate::engine::concurrent::Concurrent;
use crate::engine::hold::{self, Hold, HoldMode};
use crate::engine::lua::LuaScript;
use crate::engine::settle;
use crate::engine::{decision, Algorithm, Kind, Op, Outcome, ReleaseWaiter, Served, Wake};
use crate::error::{Error, Result};
use crate::live::Live;
use crate::metrics::{Counter, LimiterMetrics, Metrics, FIELDS};
use crate::params::validate_duration;
use crate::runtime::runtime;

/// The longest a concurrent waiter blocks before re-checking on its own: 1.5 s plus up to 1 s of
/// jitter, so waiters that started together do not re-check together. Releases wake waiters at
/// once; this only bounds how long a freed slot can go unnoticed when the waiter a release woke
/// dies before re-checking (a crashed or frozen process).
fn max_block() -> Duration {
    use std::hash::BuildHasher;
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let jitter = foldhash::fast::RandomState::default().hash_one(SEQUENCE.fetch_add(1, Ordering::Relaxed)) % 1_000;
    Duration::from_millis(1_500 + jitter)
}

/// What a blocked wait for a release ended with.
enum Popped {
    /// A release's wake-up.
    WakeUp,
    /// The timeout.
    Nothing,
    /// The connection failed (Redis down): the waiter should re-check.
    Broken,
}

/// How long a waiter pauses before re-checking when its blocking connection fails.
const BROKEN_WAIT_PAUSE: Duration = Duration::from_millis(50);

/// How long a limiter's aggregated metrics outlive their last update (Sidekiq's metadata TTL).
const METRICS_TTL: Duration = Duration::from_secs(90 * 24 * 3600);

/// How long a process's flush sequences stay after its exit flush: long enough to refuse a
/// copy of its last batch that the background flush sent at the same moment.
const METRICS_SEQ_TTL_AT_EXIT: Duration = Duration::from_secs(60);

/// How long Redis remembers a writer's last applied flush: far longer than a flush whose reply
/// was lost can wait to be resent (the next flush that reaches Redis resends it).
const METRICS_SEQ_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long the per-minute history outlives its last update: the hour it shows, and some.
const HISTORY_TTL: Duration = Duration::from_secs(2 * 3600);

/// Applies one flush of metric counts once (see `metrics.lua`).
const METRICS_SCRIPT: &str = include_str!("operating_lua/metrics.lua");

/// Lease ids granted by the fallback memory limiter carry this bit, so their release goes back
/// to it even if Redis has recovered in between.
pub(crate) const FALLBACK_LEASE_BIT: u128 = 1 << 127;

/// The first pause before an abandon (see [`RedisBackend::abandon_later`]) is sent again; it
/// doubles up to [`ABANDON_RETRY_MAX`].
const ABANDON_RETRY_FIRST: Duration = Duration::from_millis(50);
const ABANDON_RETRY_MAX: Duration = Duration::from_secs(1);

/// Abandons the lease a concurrent check asked for (see `concurrent.lua`) when the call ends
/// without handing it to its caller: dropped in flight (a cancelled task, a dropped future, an
/// aborted Node call) or failed after the check was sent (a timeout, a lost reply), when the
/// script may still run, or have run, and grant it. [`Self::disarm`] once the call has an
/// answer: the caller then has the lease, or none was granted.
struct AbandonOnDrop<'a> {
    backend: &'a Arc<RedisBackend>,
    kind: Kind,
    name: &'a str,
    key: &'a str,
    /// The limiter and the lease id of a concurrent check; `None`: nothing to abandon.
    lease: Option<(Concurrent, u128)>,
    /// Set once the check is handed to a connection: before that it cannot have run.
    sent: AtomicBool,
    /// Where the limiter's keys take their hash tag from.
    colocate: crate::engine::Colocate,
}

impl<'a> AbandonOnDrop<'a> {
    fn new(
        backend: &'a Arc<RedisBackend>,
        kind: Kind,
        name: &'a str,
        key: &'a str,
        algorithm: &Algorithm,
        op: Op,
    ) -> Self {
        let lease = match (algorithm, op) {
            (Algorithm::Concurrent(c), Op::Check { lease_id, .. }) => Some((*c, lease_id)),
            _ => None,
        };
        AbandonOnDrop { backend, kind, name, key, lease, sent: AtomicBool::new(false), colocate: Default::default() }
    }

    fn disarm(&mut self) {
        self.lease = None;
    }
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((c, lease_id)) = self.lease {
            if *self.sent.get_mut() {
                self.backend.abandon_later(self.kind, self.name, self.key, c, lease_id, self.colocate);
            }
        }
    }
}

/// How one limiter applies its backend's failure policy.
#[derive(Debug, Clone)]
pub(crate) struct Failover {
    /// The backend's policy, or [`FailurePolicy::FailClosed`] for a limiter that does not allow
    /// falling back (concurrent limiters, unless they opt in: an in-process fallback is not a
    /// fleet-wide limit, and a lease granted open guards nothing).
    pub policy: FailurePolicy,
    /// Under [`FailurePolicy::Fallback`]: the limiter scaled by the divisor, and its namespace in
    /// [`RedisBackend::fallback`].
    pub fallback: Option<(Algorithm, u32)>,
    /// Where the limiter's keys take their hash tag from (see [`crate::Colocate`]).
    pub colocate: crate::engine::Colocate,
}

/// Counters of what the failure policy did.
#[derive(Debug, Default)]
pub(crate) struct PolicyCounters {
    pub failed_open: AtomicU64,
    pub fell_back: AtomicU64,
    pub failed: AtomicU64,
    pub rejected: AtomicU64,
    pub config_mismatches: AtomicU64,
}

/// One script call, ready to send.
pub(crate) struct ScriptCall {
    pub(crate) script: &'static LuaScript,
    pub(crate) cmd: Cmd,
    /// The list a refused concurrent caller waits on.
    wake_key: Option<String>,
}

/// See the module documentation.
pub(crate) struct RedisBackend {
    connections: Arc<Connections>,
    prefix: String,
    deadline: Duration,
    policy: FailurePolicy,
    /// A manual clock whose time is sent with each call; `None` uses the server's TIME.
    manual_clock: Option<Arc<dyn Clock>>,
    /// Where state lives while Redis is unreachable, under [`FailurePolicy::Fallback`].
    pub(crate) fallback: MemoryBackend,
    pub(crate) counters: PolicyCounters,
    /// Live overrides and the limiters built from this backend.
    pub(crate) live: Live,
    /// The process whose background task (see [`live`]) serves this backend; 0: none yet.
    live_task_pid: AtomicU32,
    /// Refusals remembered in process (see [`deny_cache`]).
    pub(crate) deny_cache: deny_cache::DenyCache,
    /// Whether this is a Cluster (where a `check_all` combination needs one slot).
    cluster: bool,
    /// The leased limiters whose held keys' blocks the live task keeps up to date.
    pub(crate) watchers: leased_blocks::Watchers,
    /// The last count of the fleet's clears this process has applied (see [`cleared`]).
    clears_seen: parking_lot::Mutex<Option<u64>>,
    /// The key sealing settle tickets, once read from Redis (see [`seal`]).
    seal_key: parking_lot::Mutex<Option<Arc<crate::settle_seal::SealKey>>>,
    /// What building a limiter whose spec differs from the live processes' does.
    on_conflict: config::OnConflict,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend").field("prefix", &self.prefix).field("policy", &self.policy).finish()
    }
}

impl RedisBackend {
    pub(crate) fn new(mut config: RedisConfig) -> Result<Self> {
        crate::engine::lua::prepare_all();
        sentinel::from_url_if_any(&mut config)?;
        validate_prefix(&config.prefix)?;
        validate_duration("deadline", config.deadline)?;
        validate_duration("connect_timeout", config.connect_timeout)?;
        if let FailurePolicy::Fallback { divisor: 0 } = config.failure_policy {
            return Err(Error::invalid("divisor", "the fallback divisor must be at least 1"));
        }
        for (i, url) in config.urls.iter().enumerate().filter(|_| config.sentinel.is_none()) {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                let message = format!("must start with redis:// or rediss://, got {:?}", redact::redact_url(url));
                // A cluster's URLs are its seeds: name the one at fault, as the caller passed it.
                return Err(if config.cluster {
                    Error::invalid_field(format!("seeds[{i}]"), message)
                } else {
                    Error::invalid("url", message)
                });
            }
        }
        if let Some(tls) = &config.tls {
            tls.validate()?;
        }
        if config.deny_cache_max_entries == 0 {
            return Err(Error::invalid("deny_cache_max_entries", "must be at least 1"));
        }
        let deny_cache = deny_cache::DenyCache::new(config.deny_cache, config.deny_cache_max_entries);
        let manual_clock = config.clock.clone().filter(|c| c.is_manual());
        let fallback_clock = config.clock.clone().unwrap_or_else(crate::backend::memory::system_clock);
        Ok(RedisBackend {
            connections: Connections::for_config(&config)?,
            prefix: config.prefix,
            deadline: config.deadline,
            policy: config.failure_policy,
            manual_clock,
            fallback: MemoryBackend::new(MemoryConfig::default().clock(fallback_clock))?,
            counters: PolicyCounters::default(),
            live: Live::new(
                match config.failure_policy {
                    FailurePolicy::Fallback { divisor } => Some(divisor),
                    _ => None,
                },
                true,
            ),
            live_task_pid: AtomicU32::new(0),
            deny_cache,
            cluster: config.cluster,
            watchers: leased_blocks::Watchers::default(),
            clears_seen: parking_lot::Mutex::new(None),
            seal_key: parking_lot::Mutex::new(None),
            on_conflict: config.on_conflict,
        })
    }

    /// This process's memories of refusals, which forget those of a key another process let
    /// back in (see [`cleared`]): the deny cache and the leased limiters' lease pools.
    pub(crate) fn memories(&self) -> [&dyn cleared::Remembers; 2] {
        [&self.deny_cache, &self.watchers]
    }

    /// The connection set: equal configurations share one (and so one driven connection).
    pub(crate) fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }

    /// What building a limiter whose spec differs from the live processes' does.
    pub(crate) fn on_conflict(&self) -> config::OnConflict {
        self.on_conflict
    }

    /// The key prefix (namespace).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The manual clock's time sent with each call; `None`: scripts read the server's TIME.
    pub(crate) fn manual_now(&self) -> Option<u64> {
        self.manual_clock.as_ref().map(|clock| clock.now_micros())
    }

    /// The per-call deadline.
    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// How a limiter built from `spec` applies this backend's failure policy; `allow_fallback`
    /// false makes it fail closed whatever the policy.
    pub(crate) fn failover(
        &self,
        kind: Kind,
        name: &str,
        spec: &crate::engine::LimiterSpec,
        allow_fallback: bool,
    ) -> Result<Failover> {
        if !allow_fallback {
            return Ok(Failover { policy: FailurePolicy::FailClosed, fallback: None, colocate: Default::default() });
        }
        let fallback = match self.policy {
            FailurePolicy::Fallback { divisor } => {
                Some((spec.scaled(divisor).compile()?, self.fallback.namespace(kind, name)))
            }
            _ => None,
        };
        Ok(Failover { policy: self.policy, fallback, colocate: Default::default() })
    }

    /// Runs `op` for (`kind`, `name`, `key`), applying the failure policy when Redis fails.
    /// `fallback` is the limiter's scaled algorithm and namespace in [`Self::fallback`].
    pub(crate) async fn execute(
        self: &Arc<Self>,
        kind: Kind,
        name: &str,
        key: &str,
        algorithm: &Algorithm,
        failover: &Failover,
        op: Op,
    ) -> Result<Outcome> {
        if let Some(released) = self.fallback_release(key, failover, op) {
            return released;
        }
        let remote = match self.prepare_for(kind, name, key, algorithm, op, failover.colocate) {
            Ok(call) => {
                let mut abandon = AbandonOnDrop::new(self, kind, name, key, algorithm, op);
                abandon.colocate = failover.colocate;
                let reply =
                    evalsha::run_cmd(&self.connections, self.deadline, call.script, call.cmd, &abandon.sent).await;
                let outcome = reply.and_then(|reply| self.finish(algorithm, op, call.wake_key, reply));
                if outcome.is_ok() {
                    abandon.disarm();
                }
                outcome
            }
            Err(e) => Err(e),
        };
        self.apply_policy(remote, key, algorithm, failover, op)
    }

    /// The blocking form of [`Self::execute`]: the calling thread does the I/O itself where it
    /// can (see [`sync_client`]).
    pub(crate) fn execute_blocking(
        self: &Arc<Self>,
        kind: Kind,
        name: &str,
        key: &str,
        algorithm: &Algorithm,
        failover: &Failover,
        op: Op,
    ) -> Result<Outcome> {
        if let Some(released) = self.fallback_release(key, failover, op) {
            return released;
        }
        let remote = self.prepare_for(kind, name, key, algorithm, op, failover.colocate).and_then(|call| {
            let mut abandon = AbandonOnDrop::new(self, kind, name, key, algorithm, op);
            abandon.colocate = failover.colocate;
            let reply =
                evalsha::run_cmd_blocking(&self.connections, self.deadline, call.script, call.cmd, &abandon.sent);
            let outcome = reply.and_then(|reply| self.finish(algorithm, op, call.wake_key, reply));
            if outcome.is_ok() {
                abandon.disarm();
            }
            outcome
        });
        self.apply_policy(remote, key, algorithm, failover, op)
    }

    /// A lease granted by the fallback limiter is released and extended there, even once Redis
    /// has recovered: Redis never held it.
    fn fallback_release(&self, key: &str, failover: &Failover, op: Op) -> Option<Result<Outcome>> {
        match (op, &failover.fallback) {
            (Op::Release { lease_id } | Op::Extend { lease_id }, Some((algorithm, namespace)))
                if lease_id & FALLBACK_LEASE_BIT != 0 =>
            {
                Some(self.fallback.execute(*namespace, key, algorithm, op))
            }
            _ => None,
        }
    }

    /// What a call returns given what Redis did: the failure policy applies to an unreachable
    /// or late Redis, never to other errors (a refusal by Redis is counted, and returned).
    pub(crate) fn apply_policy(
        &self,
        remote: Result<Outcome>,
        key: &str,
        algorithm: &Algorithm,
        failover: &Failover,
        op: Op,
    ) -> Result<Outcome> {
        let error = match remote {
            Ok(outcome) => {
                if outcome.config_mismatch {
                    self.counters.config_mismatches.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(outcome);
            }
            Err(e @ (Error::BackendUnavailable { .. } | Error::Timeout { .. })) => e,
            Err(e @ Error::BackendRejected { .. }) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // A settle is not an admission: failing open would report a correction that never
        // applied, and the fallback never held the charge the ticket names. The caller is told,
        // and may retry it (it applies once).
        if matches!(op, Op::Settle { .. }) {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            return Err(error);
        }
        match (failover.policy, &failover.fallback) {
            (FailurePolicy::FailOpen, _) => {
                self.counters.failed_open.fetch_add(1, Ordering::Relaxed);
                Ok(Outcome { served: Served::FailedOpen, ..Outcome::of(open_decision(algorithm, op)) })
            }
            (FailurePolicy::Fallback { .. }, Some((algorithm, namespace))) => {
                self.counters.fell_back.fetch_add(1, Ordering::Relaxed);
                let op = match op {
                    Op::Check { cost, lease_id, waiter } => {
                        Op::Check { cost, lease_id: lease_id | FALLBACK_LEASE_BIT, waiter }
                    }
                    other => other,
                };
                let outcome = self.fallback.execute(*namespace, key, algorithm, op)?;
                Ok(Outcome { served: Served::FellBack, ..outcome })
            }
            _ => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    /// The script call that performs `op`: the engine's script, its keys by role, then the
    /// verb, the instant (empty: the server's TIME) and the engine's arguments.
    /// `colocate` says where the limiter's keys take their hash tag from.
    pub(crate) fn prepare_for(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        algorithm: &Algorithm,
        op: Op,
        colocate: crate::engine::Colocate,
    ) -> Result<ScriptCall> {
        let Some(script) = algorithm.script() else { return Err(not_applicable(algorithm, op)) };
        let keys = KeyBuilder::for_limiter(&self.prefix, kind, name, key, colocate);
        let roles = algorithm.keys(op);
        let held = hold::applies_to(op);
        let settle_id = settle::id_of(op);
        let mut cmd = script
            .evalsha(roles.len() + 2 * usize::from(held || settle_id.is_some()) + usize::from(settle_id.is_some()));
        for role in roles {
            cmd.arg(keys.arg(role));
        }
        // Last in KEYS, where the script's hold check takes them from (see `hold_check.lua`); a
        // settle passes them too (a repeat is answered as a peek, which the hold check reads).
        if held || settle_id.is_some() {
            for hold in Hold::ALL {
                cmd.arg(keys.arg(hold.key_role()));
            }
        }
        // After it, where the script's settle step takes it from (see `settle_once.lua`).
        if settle_id.is_some() {
            cmd.arg(keys.arg(settle::ROLE));
        }
        cmd.arg(op.verb());
        let now = self.manual_clock.as_ref().map(|clock| clock.now_micros());
        match now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        if let Some((id, until)) = settle_id {
            cmd.arg(id).arg(until);
        }
        algorithm.encode(op, now, &mut cmd)?;
        let wake_key = algorithm.wake_list().map(|list| keys.key(list.role));
        Ok(ScriptCall { script, cmd, wake_key })
    }

    /// The outcome of `op` from its script's `reply`: the engine's reading of it, and for a
    /// refused caller of an engine with a wake-up list, how to wait on it.
    pub(crate) fn finish(
        self: &Arc<Self>,
        algorithm: &Algorithm,
        op: Op,
        wake_key: Option<String>,
        reply: Vec<i64>,
    ) -> Result<Outcome> {
        if hold::applies_to(op) {
            if let Some(held) = hold::refusal_in_reply(algorithm.capacity(), &reply) {
                return Ok(held);
            }
        }
        if settle::id_of(op).is_some() {
            return settle::decode(algorithm, op, &reply);
        }
        let mut outcome = algorithm.decode(op, &reply)?;
        if let (Op::Check { .. } | Op::Peek, false, Some(list_key)) = (op, outcome.decision.allowed, wake_key) {
            outcome.wake = Some(Wake::Remote { waiter: self.clone(), list_key });
        }
        Ok(outcome)
    }

    /// Abandons lease `lease_id` of a concurrent limiter in the background, never blocking the
    /// caller: sent again (it is idempotent) until Redis answers, for at most `lock_timeout`,
    /// after which the lease, if granted, may be reclaimed anyway.
    fn abandon_later(
        self: &Arc<Self>,
        kind: Kind,
        name: &str,
        key: &str,
        c: Concurrent,
        lease_id: u128,
        colocate: crate::engine::Colocate,
    ) {
        let abandon = Op::Abandon { lease_id };
        let Ok(call) = self.prepare_for(kind, name, key, &Algorithm::Concurrent(c), abandon, colocate) else {
            return;
        };
        let backend = Arc::downgrade(self);
        let give_up_at = tokio::time::Instant::now() + Duration::from_micros(c.lock_us);
        runtime().spawn(async move {
            let mut pause = ABANDON_RETRY_FIRST;
            loop {
                let Some(this) = backend.upgrade() else { return };
                let sent = AtomicBool::new(false);
                let answered =
                    evalsha::run_cmd(&this.connections, this.deadline, call.script, call.cmd.clone(), &sent).await;
                drop(this);
                if answered.is_ok() || tokio::time::Instant::now() + pause >= give_up_at {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(ABANDON_RETRY_MAX);
            }
        });
    }

    /// Forgets every key of (`kind`, `name`, `key`); waiters of a concurrent limiter are woken,
    /// and other processes forget their remembered refusals of the key (see [`cleared`]).
    pub(crate) async fn reset(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        algorithm: &Algorithm,
        colocate: crate::engine::Colocate,
    ) -> Result<()> {
        let keys = KeyBuilder::for_limiter(&self.prefix, kind, name, key, colocate);
        let mut pipe = redis::pipe();
        // A reset forgets a pause and a block too: they are state of the same identity.
        let state = algorithm.state_keys().iter().copied().chain(Hold::ALL.map(Hold::key_role));
        pipe.del(state.map(|r| keys.key(r)).collect::<Vec<_>>()).ignore();
        if let Some(list) = algorithm.wake_list() {
            let wake = keys.key(list.role);
            for _ in 0..list.slots.min(1024) {
                pipe.lpush(&wake, "1").ignore();
            }
            pipe.pexpire(&wake, (list.ttl_us / 1000).max(1) as i64).ignore();
        }
        self.query_acked::<()>(&pipe).await?;
        self.announce_cleared(kind, name, key).await;
        Ok(())
    }

    /// Holds (`kind`, `name`, `key`) in role `hold` for `duration` (see `hold.lua` for `mode`);
    /// returns the hold in effect. Every process's next check reads it (the hold check of every
    /// engine's script). Under the `fallback` policy the fallback limiter is held too, so a hold
    /// stands while Redis is unreachable.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn hold(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        failover: &Failover,
        hold: Hold,
        duration: Duration,
        mode: HoldMode,
    ) -> Result<Duration> {
        if let Some((_, namespace)) = &failover.fallback {
            self.fallback.hold(*namespace, key, hold, duration, mode);
        }
        let script: &'static LuaScript = &hold::SCRIPT;
        let keys = KeyBuilder::for_limiter(&self.prefix, kind, name, key, failover.colocate);
        let mut cmd = script.evalsha(1);
        cmd.arg(keys.key(hold.key_role())).arg(mode.verb());
        match self.manual_clock.as_ref().map(|clock| clock.now_micros()) {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(crate::params::micros(duration).max(1));
        let sent = AtomicBool::new(false);
        let reply = evalsha::run_cmd(&self.connections, self.deadline, script, cmd, &sent).await?;
        if hold == Hold::Block && kind == Kind::Leased {
            // The block stands if this fails: other processes see it at their next round trip.
            let _ = self.announce_leased_block().await;
        }
        hold::in_effect(&reply)
    }

    /// Ends the hold of role `hold` on (`kind`, `name`, `key`) by deleting its key (see
    /// `limiter/hold.rs`), in the fallback limiter too; returns whether Redis held one. Other
    /// processes forget their remembered refusals of the key (see [`cleared`]).
    pub(crate) async fn release(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        failover: &Failover,
        hold: Hold,
    ) -> Result<bool> {
        if let Some((_, namespace)) = &failover.fallback {
            self.fallback.release(*namespace, key, hold);
        }
        let keys = KeyBuilder::for_limiter(&self.prefix, kind, name, key, failover.colocate);
        let mut pipe = redis::pipe();
        pipe.del(keys.key(hold.key_role()));
        let (deleted,): (u64,) = self.query_acked(&pipe).await?;
        if deleted > 0 {
            if hold == Hold::Block && kind == Kind::Leased {
                let _ = self.announce_leased_block().await;
            }
            self.announce_cleared(kind, name, key).await;
        }
        Ok(deleted > 0)
    }

    /// Runs a pipeline (not a script) within the deadline.
    async fn query<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        self.query_via(None, pipe).await
    }

    /// [`Self::query`] for a pipeline that writes state: with `replica_acks`, it runs on a
    /// dedicated connection followed by `WAIT`, and fails as unavailable when too few replicas
    /// acknowledged within the deadline (see [`evalsha::acknowledged`]).
    async fn query_acked<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let acks = self.connections.replica_acks();
        if acks == 0 {
            return self.query(pipe).await;
        }
        let until = tokio::time::Instant::now() + self.deadline;
        let timed_out = || self.connections.timeout(self.deadline);
        let acked = async {
            let mut conn = self.connections.dedicated().await?;
            let value = pipe.query_async::<T>(&mut conn).await.map_err(|e| evalsha::redis_failure(&e))?;
            let wait = evalsha::wait_for(acks, until.saturating_duration_since(tokio::time::Instant::now()));
            let count = wait.query_async::<redis::Value>(&mut conn).await.map_err(|e| evalsha::redis_failure(&e))?;
            self.connections.give_back(conn);
            evalsha::acknowledged(&self.connections, Some(acks), Some(count), self.deadline).map(|()| value)
        };
        tokio::time::timeout_at(until, acked).await.map_err(|_| timed_out())?
    }

    /// Runs a pipeline within the deadline on `own` connection (opened, and named
    /// `ratekeeper-live` so `CLIENT LIST` tells it apart, when it is `None`; dropped when it
    /// fails), or on the shared one.
    pub(crate) async fn query_via<T: redis::FromRedisValue>(
        &self,
        own: Option<&mut Option<connection::Conn>>,
        pipe: &redis::Pipeline,
    ) -> Result<T> {
        let Some(own) = own else { return self.query_shared(pipe).await };
        let until = tokio::time::Instant::now() + self.deadline;
        let timed_out = || self.connections.timeout(self.deadline);
        if own.is_none() {
            let mut conn =
                tokio::time::timeout_at(until, self.connections.dedicated()).await.map_err(|_| timed_out())??;
            let setname = redis::cmd("CLIENT").arg("SETNAME").arg("ratekeeper-live").to_owned();
            // Naming is for operators only: a server or proxy that refuses it changes nothing.
            let _ = tokio::time::timeout_at(until, setname.query_async::<()>(&mut conn)).await;
            *own = Some(conn);
        }
        let conn = own.as_mut().expect("opened above");
        let result = match tokio::time::timeout_at(until, pipe.query_async::<T>(conn)).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => Err(evalsha::redis_failure(&e)),
            Err(_) => Err(timed_out()),
        };
        *own = None;
        result
    }

    async fn query_shared<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let until = tokio::time::Instant::now() + self.deadline;
        let timed_out = || self.connections.timeout(self.deadline);
        let (mut conn, _) =
            tokio::time::timeout_at(until, self.connections.shared()).await.map_err(|_| timed_out())??;
        tokio::time::timeout_at(until, pipe.query_async::<T>(&mut conn))
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| evalsha::redis_failure(&e))
    }

    fn metrics_key(&self, kind: Kind, name: &str) -> String {
        KeyBuilder::new(&self.prefix, kind, name, "").key("metrics")
    }

    /// Sends `metrics`' unacknowledged batch, then (if any) the counts made since, each applied
    /// by Redis once (see [`LimiterMetrics`]); a failed send keeps its batch for the next flush.
    /// `last`: the process is exiting, so after this flush no batch of `metrics` follows and its
    /// sequence is kept in Redis for [`METRICS_SEQ_TTL_AT_EXIT`] rather than a day.
    pub(crate) async fn flush_metrics(
        &self,
        kind: Kind,
        name: &str,
        metrics: &LimiterMetrics,
        last: bool,
        mut own: Option<&mut Option<connection::Conn>>,
    ) -> Result<()> {
        // At most two batches: the unacknowledged one, then the counts made while it was out.
        for _ in 0..2 {
            let Some(batch) = metrics.next_batch() else { return Ok(()) };
            let keys = KeyBuilder::new(&self.prefix, kind, name, "");
            let mut eval = redis::cmd("EVAL");
            eval.arg(METRICS_SCRIPT).arg(3).arg(keys.key("metrics"));
            // `…:metrics-seq:<process>`: one hash per process (a field per limiter object), with
            // the metrics hash's hash tag, so one slot on a cluster.
            eval.arg(format!("{}{}", keys.key("metrics-seq"), crate::metrics::process_writer()));
            eval.arg(self.history_key(kind, name));
            eval.arg(batch.seq).arg(METRICS_TTL.as_millis() as u64).arg(METRICS_SEQ_TTL.as_millis() as u64);
            let delta = |c: Counter| batch.deltas[c as usize];
            let allowed = delta(Counter::Allowed) + delta(Counter::FailedOpen) + delta(Counter::FellBack);
            eval.arg(HISTORY_TTL.as_millis() as u64)
                .arg(views::HISTORY_SLOTS)
                .arg(allowed)
                .arg(delta(Counter::Refused))
                .arg(metrics.writer())
                .arg(if last && metrics.settled_after(&batch) {
                    METRICS_SEQ_TTL_AT_EXIT.as_millis().to_string()
                } else {
                    String::new()
                });
            for (field, delta) in FIELDS.iter().zip(batch.deltas) {
                if delta > 0 {
                    eval.arg(*field).arg(delta);
                }
            }
            let mut pipe = redis::pipe();
            pipe.add_command(eval).ignore();
            self.query_via::<()>(own.as_deref_mut(), &pipe).await?;
            metrics.acknowledge(batch.seq);
        }
        Ok(())
    }

    /// Flushes this process's pending counts, then reads the aggregate of every process.
    pub(crate) async fn fleet_metrics(&self, kind: Kind, name: &str, metrics: &LimiterMetrics) -> Result<Metrics> {
        self.flush_metrics(kind, name, metrics, false, None).await?;
        self.fleet_metrics_of(kind, name).await
    }

    /// Returns when a release pushes a wake-up to `list_key` (one waiter per release), or after
    /// `timeout` (at most [`max_block`]).
    ///
    /// The BLPOP runs on a dedicated connection in a task of its own, so a waiter that stops
    /// waiting (its own timer fired, its future was dropped) cannot lose a wake-up it was handed:
    /// the task passes it on to the next waiter. The waiter's own timer is exact; Redis checks
    /// BLPOP timeouts only about ten times a second.
    async fn wait_for_wake_up(self: &Arc<Self>, list_key: &str, timeout: Duration) {
        let timeout = timeout.min(max_block());
        let (woken, wake) = tokio::sync::oneshot::channel::<()>();
        let (this, key) = (self.clone(), list_key.to_owned());
        runtime().spawn(async move {
            match this.pop_wake(&key, timeout).await {
                Popped::WakeUp => {
                    if woken.send(()).is_err() {
                        // Best effort: if Redis is gone too, waiters re-check within max_block().
                        let _ = this.push_wake(&key).await;
                    }
                }
                // Let the waiter re-check now: its check applies the failure policy. The pause
                // keeps a waiter whose dedicated connections fail (but whose calls do not) from
                // spinning.
                Popped::Broken => {
                    tokio::time::sleep(BROKEN_WAIT_PAUSE).await;
                    let _ = woken.send(());
                }
                Popped::Nothing => {}
            }
        });
        let _ = tokio::time::timeout(timeout, wake).await;
    }

    /// BLPOP on a dedicated connection.
    async fn pop_wake(&self, key: &str, timeout: Duration) -> Popped {
        let Ok(mut conn) = self.connections.dedicated().await else { return Popped::Broken };
        let seconds = timeout.as_secs_f64().max(0.001);
        let blpop = redis::cmd("BLPOP").arg(key).arg(format!("{seconds:.3}")).to_owned();
        match tokio::time::timeout(timeout + self.deadline, blpop.query_async::<Option<(String, String)>>(&mut conn))
            .await
        {
            Ok(Ok(popped)) => {
                self.connections.give_back(conn);
                if popped.is_some() {
                    Popped::WakeUp
                } else {
                    Popped::Nothing
                }
            }
            Ok(Err(_)) => Popped::Broken,
            Err(_elapsed) => Popped::Nothing,
        }
    }

    /// Hands a wake-up its waiter no longer wants to the next waiter.
    async fn push_wake(&self, key: &str) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.lpush(key, "1").ignore().ltrim(key, 0, 1023).ignore().pexpire(key, 60_000).ignore();
        self.query::<()>(&pipe).await
    }
}

/// What a call gets when failing open: allowed, with the limiter's full capacity. A concurrent
/// lease granted this way has fencing token 0 and its release is a no-op.
fn open_decision(algorithm: &Algorithm, op: Op) -> Decision {
    let capacity = algorithm.capacity();
    let mut d = decision(true, capacity, capacity, 0, 0);
    if let (Algorithm::Concurrent(_), Op::Check { lease_id, .. }) = (algorithm, op) {
        d.lease = Some(Lease { id: lease_id, fencing_token: 0, granted_at_micros: 0 });
    }
    d
}

#[cold]
fn not_applicable(algorithm: &Algorithm, op: Op) -> Error {
    Error::invalid("operation", format!("{op:?} does not apply to {algorithm:?}"))
}

impl ReleaseWaiter for RedisBackend {
    fn wait_for_release<'a>(
        self: Arc<Self>,
        list_key: &'a str,
        timeout: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move { self.wait_for_wake_up(list_key, timeout).await })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::{LimiterSpec, SlidingLimit};

    /// The keys a call passes (KEYS), as their roles' suffixes.
    fn keys_of(spec: LimiterSpec) -> Vec<String> {
        let backend = RedisBackend::new(RedisConfig::new("redis://127.0.0.1:1")).unwrap();
        let algorithm = spec.compile().unwrap();
        let call = backend
            .prepare_for(
                spec.kind(),
                "n",
                "k",
                &algorithm,
                Op::Check { cost: 1, lease_id: 0, waiter: None },
                Default::default(),
            )
            .unwrap();
        let args: Vec<Vec<u8>> = call
            .cmd
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect();
        let count: usize = std::str::from_utf8(&args[2]).unwrap().parse().unwrap();
        args[3..3 + count].iter().map(|k| String::from_utf8_lossy(k).rsplit(':').nth(1).unwrap().to_owned()).collect()
    }

    /// A fixed window (one block per limit) is a counter in the hash alone: its call does not
    /// pass the sorted set that only sub-buckets use. (A check also passes the pause and block
    /// keys, last.)
    #[test]
    fn fixed_windows_pass_only_the_hash() {
        let second = Duration::from_secs(1);
        assert_eq!(keys_of(LimiterSpec::Bucket { limit: 5, interval: second }), ["h", "p", "bk"]);
        let fixed = |duration| SlidingLimit { duration, limit: 5, precision: None };
        let two_fixed = LimiterSpec::SlidingWindow { limits: vec![fixed(second), fixed(60 * second)] };
        assert_eq!(keys_of(two_fixed), ["h", "p", "bk"]);
        let sub_buckets = SlidingLimit { duration: 60 * second, limit: 5, precision: Some(second) };
        let mixed = LimiterSpec::SlidingWindow { limits: vec![fixed(second), sub_buckets] };
        assert_eq!(keys_of(mixed), ["h", "b", "p", "bk"]);
    }
}
