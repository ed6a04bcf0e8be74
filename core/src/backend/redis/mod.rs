//! The Redis and Redis Cluster backend: every limiter is one atomic Lua script per call, time
//! comes from the server's `TIME`, every key carries a TTL, and a failure policy decides what a
//! call does when Redis cannot answer within the per-call deadline.

pub(crate) mod config;
pub(crate) mod connection;
pub(crate) mod direct;
pub(crate) mod keys;
pub(crate) mod resolve;
pub(crate) mod resp;
pub(crate) mod scripts;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use config::{FailurePolicy, RedisConfig};
pub(crate) use connection::Connections;
use keys::{validate_prefix, KeyBuilder};
use redis::Cmd;
use scripts::LuaScript;

use super::memory::{MemoryBackend, MemoryConfig};
use super::{Op, Outcome, Wake};
use crate::clock::Clock;
use crate::decision::{Decision, Lease, LimitStatus};
use crate::error::{Error, Result};
use crate::limiter::concurrent::Concurrent;
use crate::limiter::gcra::Gcra;
use crate::limiter::sliding::{Sliding, Snapshot};
use crate::limiter::{decision, Algorithm, Kind};
use crate::metrics::{from_values, LimiterMetrics, Metrics, FIELDS};
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

/// How often a process adds its concurrent limiters' metric counts to Redis.
const METRICS_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// How long a limiter's aggregated metrics outlive their last update (Sidekiq's metadata TTL).
const METRICS_TTL: Duration = Duration::from_secs(90 * 24 * 3600);

/// How long Redis remembers a writer's last applied flush: far longer than a flush whose reply
/// was lost can wait to be resent (the next flush that reaches Redis resends it).
const METRICS_SEQ_TTL: Duration = Duration::from_secs(24 * 3600);

/// Applies one flush of metric counts once (see `metrics.lua`).
const METRICS_SCRIPT: &str = include_str!("../../scripts/metrics.lua");

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
        AbandonOnDrop { backend, kind, name, key, lease, sent: AtomicBool::new(false) }
    }

    fn disarm(&mut self) {
        self.lease = None;
    }
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((c, lease_id)) = self.lease {
            if *self.sent.get_mut() {
                self.backend.abandon_later(self.kind, self.name, self.key, c, lease_id);
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
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend").field("prefix", &self.prefix).field("policy", &self.policy).finish()
    }
}

impl RedisBackend {
    pub(crate) fn new(config: RedisConfig) -> Result<Self> {
        validate_prefix(&config.prefix)?;
        validate_duration("deadline", config.deadline)?;
        validate_duration("connect_timeout", config.connect_timeout)?;
        if let FailurePolicy::Fallback { divisor: 0 } = config.failure_policy {
            return Err(Error::invalid("divisor", "the fallback divisor must be at least 1"));
        }
        for url in &config.urls {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(Error::invalid("url", format!("must start with redis:// or rediss://, got {url:?}")));
            }
        }
        let manual_clock = config.clock.clone().filter(|c| c.is_manual());
        let fallback_clock = config.clock.clone().unwrap_or_else(|| Arc::new(crate::clock::SystemClock));
        Ok(RedisBackend {
            connections: Connections::for_config(&config)?,
            prefix: config.prefix,
            deadline: config.deadline,
            policy: config.failure_policy,
            manual_clock,
            fallback: MemoryBackend::new(MemoryConfig::default().clock(fallback_clock))?,
            counters: PolicyCounters::default(),
        })
    }

    /// The connection set: equal configurations share one (and so one driven connection).
    pub(crate) fn connections(&self) -> &Arc<Connections> {
        &self.connections
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
        spec: &crate::limiter::LimiterSpec,
        allow_fallback: bool,
    ) -> Result<Failover> {
        if !allow_fallback {
            return Ok(Failover { policy: FailurePolicy::FailClosed, fallback: None });
        }
        let fallback = match self.policy {
            FailurePolicy::Fallback { divisor } => {
                Some((spec.scaled(divisor).compile()?, self.fallback.namespace(kind, name)))
            }
            _ => None,
        };
        Ok(Failover { policy: self.policy, fallback })
    }

    fn now_arg(&self) -> String {
        self.manual_clock.as_ref().map(|c| c.now_micros().to_string()).unwrap_or_default()
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
        let remote = match self.prepare(kind, name, key, algorithm, op) {
            Ok(call) => {
                let mut abandon = AbandonOnDrop::new(self, kind, name, key, algorithm, op);
                let reply =
                    scripts::run_cmd(&self.connections, self.deadline, call.script, call.cmd, &abandon.sent).await;
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
    /// can (see [`direct`]).
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
        let remote = self.prepare(kind, name, key, algorithm, op).and_then(|call| {
            let mut abandon = AbandonOnDrop::new(self, kind, name, key, algorithm, op);
            let reply =
                scripts::run_cmd_blocking(&self.connections, self.deadline, call.script, call.cmd, &abandon.sent);
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
        match (failover.policy, &failover.fallback) {
            (FailurePolicy::FailOpen, _) => {
                self.counters.failed_open.fetch_add(1, Ordering::Relaxed);
                Ok(Outcome::of(open_decision(algorithm, op)))
            }
            (FailurePolicy::Fallback { .. }, Some((algorithm, namespace))) => {
                self.counters.fell_back.fetch_add(1, Ordering::Relaxed);
                let op = match op {
                    Op::Check { cost, lease_id } => Op::Check { cost, lease_id: lease_id | FALLBACK_LEASE_BIT },
                    other => other,
                };
                self.fallback.execute(*namespace, key, algorithm, op)
            }
            _ => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    /// The script call that performs `op`.
    pub(crate) fn prepare(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        algorithm: &Algorithm,
        op: Op,
    ) -> Result<ScriptCall> {
        let keys = KeyBuilder::new(&self.prefix, kind, name, key);
        let now = self.now_arg();
        let verb = |op: Op| match op {
            Op::Check { .. } => "check",
            Op::Peek => "peek",
            Op::Adjust { .. } => "adjust",
            Op::Release { .. } => "release",
            Op::Extend { .. } => "extend",
            Op::Abandon { .. } => "abandon",
        };
        let call = |script: &'static LuaScript, cmd: Cmd| Ok(ScriptCall { script, cmd, wake_key: None });
        match (algorithm, op) {
            (Algorithm::Gcra(g), Op::Check { .. } | Op::Peek | Op::Adjust { .. }) => {
                let (first, second) = match op {
                    Op::Check { cost, .. } => (cost, 0),
                    Op::Adjust { estimate, actual } => (estimate, actual),
                    _ => (0, 0),
                };
                // Written straight into the command (no per-argument `String`s): the hot path.
                let mut cmd = scripts::GCRA.evalsha(1);
                cmd.arg(keys.key("s"))
                    .arg(verb(op))
                    .arg(now)
                    .arg(g.tick_ns)
                    .arg(g.emission)
                    .arg(g.tau)
                    .arg(g.max_ahead);
                cmd.arg(first).arg(second);
                call(&scripts::GCRA, cmd)
            }
            (Algorithm::Sliding(s), Op::Check { .. } | Op::Peek) => {
                let mut cmd = scripts::SLIDING.evalsha(2);
                cmd.arg(keys.key("h")).arg(keys.key("b")).arg(verb(op)).arg(now).arg(cost_of(op));
                cmd.arg(s.fingerprint).arg(s.limits.len());
                for l in s.limits.iter() {
                    cmd.arg(l.limit).arg(l.duration_us).arg(l.precision_us).arg(l.blocks);
                }
                call(&scripts::SLIDING, cmd)
            }
            (Algorithm::Log(l), Op::Check { .. } | Op::Peek) => {
                let mut cmd = scripts::LOG.evalsha(3);
                cmd.arg(keys.key("z")).arg(keys.key("d")).arg(keys.key("l"));
                cmd.arg(verb(op)).arg(now).arg(cost_of(op)).arg(l.longest_us).arg(l.fingerprint).arg(l.windows.len());
                for &(limit, interval) in l.windows.iter() {
                    cmd.arg(limit).arg(interval);
                }
                call(&scripts::LOG, cmd)
            }
            (
                Algorithm::Concurrent(c),
                Op::Check { .. } | Op::Peek | Op::Release { .. } | Op::Extend { .. } | Op::Abandon { .. },
            ) => {
                let lease_id = match op {
                    Op::Check { lease_id, .. }
                    | Op::Release { lease_id }
                    | Op::Extend { lease_id }
                    | Op::Abandon { lease_id } => lease_id,
                    _ => 0,
                };
                let wake_key = keys.key("w");
                let mut cmd = scripts::CONCURRENT.evalsha(4);
                cmd.arg(keys.key("h")).arg(keys.key("t")).arg(&wake_key).arg(keys.key("x"));
                cmd.arg(verb(op)).arg(now).arg(c.limit).arg(c.lock_us).arg(format!("{lease_id:032x}"));
                Ok(ScriptCall { script: &scripts::CONCURRENT, cmd, wake_key: Some(wake_key) })
            }
            (algorithm, op) => Err(Error::invalid("operation", format!("{op:?} does not apply to {algorithm:?}"))),
        }
    }

    /// The outcome of `op` from its script's `reply`.
    pub(crate) fn finish(
        self: &Arc<Self>,
        algorithm: &Algorithm,
        op: Op,
        wake_key: Option<String>,
        reply: Vec<i64>,
    ) -> Result<Outcome> {
        let c = match algorithm {
            Algorithm::Concurrent(c) => c,
            Algorithm::Gcra(g) => return gcra_outcome(g, op, &reply),
            Algorithm::Sliding(s) => return sliding_outcome(s, op, &reply),
            Algorithm::Log(_) => {
                let d = decision_from(&reply, Some(7));
                return Ok(Outcome { config_mismatch: reply.get(6) == Some(&1), ..Outcome::of(d) });
            }
            _ => return Ok(Outcome::of(decision_from(&reply, None))),
        };
        if let Op::Abandon { .. } = op {
            // Freed, or remembered so that the check it belongs to grants nothing: done either way.
            return Ok(Outcome::of(decision(true, c.limit, 0, 0, 0)));
        }
        if let Op::Release { .. } | Op::Extend { .. } = op {
            let mut d = decision(true, c.limit, 0, 0, 0);
            d.decided_at_micros = reply.get(1).copied().unwrap_or(0).max(0) as u64;
            return match reply.first() {
                Some(1) => Ok(Outcome { lease_overdue: reply.get(2) == Some(&1), ..Outcome::of(d) }),
                _ => Err(Error::lease_lost()),
            };
        }
        let mut d = decision_from(&reply, None);
        let wake = if d.allowed {
            if let Op::Check { lease_id, .. } = op {
                d.lease = Some(Lease {
                    id: lease_id,
                    fencing_token: reply.get(6).copied().unwrap_or(0) as u64,
                    granted_at_micros: d.decided_at_micros,
                });
            }
            None
        } else {
            wake_key.map(|list_key| Wake::Redis { backend: self.clone(), list_key })
        };
        let reclaimed = reply.get(7).copied().unwrap_or(0).max(0) as u64;
        Ok(Outcome { decision: d, wake, reclaimed, lease_overdue: false, config_mismatch: false })
    }

    /// Abandons lease `lease_id` of a concurrent limiter in the background, never blocking the
    /// caller: sent again (it is idempotent) until Redis answers, for at most `lock_timeout`,
    /// after which the lease, if granted, may be reclaimed anyway.
    fn abandon_later(self: &Arc<Self>, kind: Kind, name: &str, key: &str, c: Concurrent, lease_id: u128) {
        let Ok(call) = self.prepare(kind, name, key, &Algorithm::Concurrent(c), Op::Abandon { lease_id }) else {
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
                    scripts::run_cmd(&this.connections, this.deadline, call.script, call.cmd.clone(), &sent).await;
                drop(this);
                if answered.is_ok() || tokio::time::Instant::now() + pause >= give_up_at {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(ABANDON_RETRY_MAX);
            }
        });
    }

    /// Forgets every key of (`kind`, `name`, `key`); waiters of a concurrent limiter are woken.
    pub(crate) async fn reset(&self, kind: Kind, name: &str, key: &str, algorithm: &Algorithm) -> Result<()> {
        let keys = KeyBuilder::new(&self.prefix, kind, name, key);
        let roles: &[&str] = match algorithm {
            Algorithm::Gcra(_) => &["s"],
            Algorithm::Sliding(_) => &["h", "b"],
            Algorithm::Log(_) => &["z", "d", "l"],
            Algorithm::Concurrent(_) => &["h", "t", "x"],
            Algorithm::Unlimited => &[],
        };
        let mut pipe = redis::pipe();
        pipe.del(roles.iter().map(|r| keys.key(r)).collect::<Vec<_>>()).ignore();
        if let Algorithm::Concurrent(c) = algorithm {
            let wake = keys.key("w");
            for _ in 0..c.limit.min(1024) {
                pipe.lpush(&wake, "1").ignore();
            }
            pipe.pexpire(&wake, (c.lock_us / 1000).max(1) as i64).ignore();
        }
        self.query(&pipe).await
    }

    /// Runs a pipeline (not a script) within the deadline.
    async fn query<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        let until = tokio::time::Instant::now() + self.deadline;
        let timed_out = || Error::redis_timeout(self.deadline);
        let (mut conn, _) =
            tokio::time::timeout_at(until, self.connections.shared()).await.map_err(|_| timed_out())??;
        tokio::time::timeout_at(until, pipe.query_async::<T>(&mut conn))
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| scripts::redis_failure(&e))
    }

    fn metrics_key(&self, kind: Kind, name: &str) -> String {
        KeyBuilder::new(&self.prefix, kind, name, "").key("metrics")
    }

    /// Adds `metrics`' counts to Redis once a second (one pipeline, only when something changed)
    /// until the limiter or the backend is dropped.
    pub(crate) fn spawn_metrics_flush(self: &Arc<Self>, kind: Kind, name: &str, metrics: &Arc<LimiterMetrics>) {
        let (backend, metrics, name) = (Arc::downgrade(self), Arc::downgrade(metrics), name.to_owned());
        runtime().spawn(async move {
            let mut tick = tokio::time::interval(METRICS_FLUSH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let (Some(backend), Some(metrics)) = (backend.upgrade(), metrics.upgrade()) else { return };
                // A failed flush keeps its counts for the next one.
                let _ = backend.flush_metrics(kind, &name, &metrics).await;
            }
        });
    }

    /// Sends `metrics`' unacknowledged batch, then (if any) the counts made since, each applied
    /// by Redis once (see [`LimiterMetrics`]); a failed send keeps its batch for the next flush.
    async fn flush_metrics(&self, kind: Kind, name: &str, metrics: &LimiterMetrics) -> Result<()> {
        // At most two batches: the unacknowledged one, then the counts made while it was out.
        for _ in 0..2 {
            let Some(batch) = metrics.next_batch() else { return Ok(()) };
            let keys = KeyBuilder::new(&self.prefix, kind, name, "");
            let mut eval = redis::cmd("EVAL");
            eval.arg(METRICS_SCRIPT).arg(2).arg(keys.key("metrics"));
            // `…:metrics-seq:<writer>`: the metrics hash's hash tag, so one slot on a cluster.
            eval.arg(format!("{}{}", keys.key("metrics-seq"), metrics.writer()));
            eval.arg(batch.seq).arg(METRICS_TTL.as_millis() as u64).arg(METRICS_SEQ_TTL.as_millis() as u64);
            for (field, delta) in FIELDS.iter().zip(batch.deltas) {
                if delta > 0 {
                    eval.arg(*field).arg(delta);
                }
            }
            let mut pipe = redis::pipe();
            pipe.add_command(eval).ignore();
            self.query::<()>(&pipe).await?;
            metrics.acknowledge(batch.seq);
        }
        Ok(())
    }

    /// Flushes this process's pending counts, then reads the aggregate of every process.
    pub(crate) async fn fleet_metrics(&self, kind: Kind, name: &str, metrics: &LimiterMetrics) -> Result<Metrics> {
        self.flush_metrics(kind, name, metrics).await?;
        let mut pipe = redis::pipe();
        pipe.hgetall(self.metrics_key(kind, name));
        let (values,): (std::collections::HashMap<String, u64>,) = self.query(&pipe).await?;
        Ok(from_values(FIELDS.map(|f| values.get(f).copied().unwrap_or(0))))
    }

    /// Returns when a release pushes a wake-up to `list_key` (one waiter per release), or after
    /// `timeout` (at most [`max_block`]).
    ///
    /// The BLPOP runs on a dedicated connection in a task of its own, so a waiter that stops
    /// waiting (its own timer fired, its future was dropped) cannot lose a wake-up it was handed:
    /// the task passes it on to the next waiter. The waiter's own timer is exact; Redis checks
    /// BLPOP timeouts only about ten times a second.
    pub(crate) async fn wait_for_release(self: &Arc<Self>, list_key: &str, timeout: Duration) {
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

fn cost_of(op: Op) -> u64 {
    match op {
        Op::Check { cost, .. } => cost,
        _ => 1,
    }
}

/// The outcome of GCRA operation `op` from its script's reply `{tat_us, tat_ns, now}`: the state
/// the script read (microseconds, and nanoseconds within the microsecond) and its instant. The
/// script applied the rule's write; the decision is the rule's own (see `gcra.lua`), replayed
/// here on what the script read.
fn gcra_outcome(g: &Gcra, op: Op, reply: &[i64]) -> Result<Outcome> {
    let &[tat_us, tat_ns, now] = reply else {
        return Err(Error::BackendUnavailable { message: format!("Redis: unexpected GCRA reply {reply:?}") });
    };
    let mut tat = (tat_us.max(0) as u64).saturating_mul(1000).saturating_add(tat_ns.clamp(0, 999) as u64);
    let now = now.max(0) as u64;
    let mut decision = g.run(&mut tat, now, op).decision;
    decision.decided_at_micros = now;
    Ok(Outcome::of(decision))
}

/// The outcome of sliding-window operation `op` from its script's reply: the instant, whether
/// another configuration recorded last, then per limit what the rule reads (see `sliding.lua`).
/// The script applied the rule's write; the decision is the rule's own, replayed here.
fn sliding_outcome(s: &Sliding, op: Op, reply: &[i64]) -> Result<Outcome> {
    let malformed =
        || Error::BackendUnavailable { message: format!("Redis: unexpected sliding-window reply {reply:?}") };
    let [now, mismatch, limits @ ..] = reply else { return Err(malformed()) };
    if limits.len() != 3 * s.limits.len() {
        return Err(malformed());
    }
    let block = |v: i64| u64::try_from(v).ok();
    let mut counts: Vec<Snapshot> = limits
        .chunks_exact(3)
        .map(|c| Snapshot { total: c[0].max(0) as u64, newest: block(c[1]), freeing: block(c[2]) })
        .collect();
    let now = (*now).max(0) as u64;
    let mut decision = s.decide(&mut counts, now, op).decision;
    decision.decided_at_micros = now;
    Ok(Outcome { config_mismatch: *mismatch == 1, ..Outcome::of(decision) })
}

/// Decodes the reply of a script that decides itself (the exact sliding window's, the concurrent
/// limiter's): {allowed, limit, remaining, retry_us, reset_us, now_us, …}. Multi-limit replies
/// (the log script's) have five numbers per limit from `details_from` on; the concurrent
/// script's trailing numbers are its token and reclaim count, read by its caller.
fn decision_from(reply: &[i64], details_from: Option<usize>) -> Decision {
    let at = |i: usize| reply.get(i).copied().unwrap_or(0).max(0) as u64;
    let mut d = decision(at(0) == 1, at(1), at(2), at(3), at(4));
    d.decided_at_micros = at(5);
    if let Some(details) = details_from.and_then(|from| reply.get(from..)).filter(|d| !d.is_empty()) {
        let details: Vec<LimitStatus> = details
            .chunks_exact(5)
            .map(|c| LimitStatus {
                window: Duration::from_micros(c[0] as u64),
                limit: c[1] as u64,
                remaining: c[2] as u64,
                retry_after: Duration::from_micros(c[3] as u64),
                reset_after: Duration::from_micros(c[4] as u64),
            })
            .collect();
        d.limits = Some(details.into_boxed_slice());
    }
    d
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
