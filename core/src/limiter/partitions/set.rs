//! [`PartitionSet`]: one partitions limiter's leases and pacing in one process, per key.
//!
//! A check is decided in the process by the key's [`Pacer`]. On Redis, a check that finds the
//! key's lease due first leases (the first call, then every third of `lease_ttl`, or every
//! tenth while the member holds less than its fair share); calls that find a lease in flight
//! go on with what is held, unless nothing is, and then wait for it. Nothing runs in the
//! background: a key nobody uses is not renewed, and its partitions lapse after `lease_ttl`.
//! A key's pool is dropped once idle (see [`MAX_POOLS`]), so the keys a process ever saw do not
//! accumulate.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::redis::partitions::{self as lease, Granted};
use crate::backend::RedisBackend;
use crate::clock::{monotonic_micros, Clock};
use crate::decision::Decision;
use crate::engine::contract::not_applicable;
use crate::engine::partitions::pacing::{Held, Pacer};
use crate::engine::partitions::Partitions;
use crate::engine::{Op, Outcome};
use crate::error::Result;
use crate::runtime::{forked_since, runtime};

/// Where a partitions limiter's leases live.
#[derive(Debug)]
pub(crate) enum Source {
    /// The memory backend: the process is the only one, and holds every partition of its class.
    Memory,
    /// Redis: partitions are leased.
    Redis(Arc<RedisBackend>),
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct PartitionSet {
    params: Partitions,
    name: Box<str>,
    source: Source,
    /// A manual clock (tests); `None`: a monotonic clock, so that a step of the wall clock never
    /// stretches a lease's local deadline.
    manual: Option<Arc<dyn Clock>>,
    /// The backend's clock, which `acquire` sleeps by.
    clock: Arc<dyn Clock>,
    /// The process this state belongs to: a forked child starts afresh (it holds no lease).
    pid: AtomicU32,
    keys: Mutex<Keys>,
}

#[derive(Debug, Default)]
struct Keys {
    /// This limiter's member id in this process: `<pid>-<random>`.
    member: Arc<str>,
    pools: HashMap<Box<str>, Arc<Pool>>,
}

/// How many keys' pools a set holds before it drops its idle ones (fewer in this crate's tests,
/// so that they reach it quickly). A pool is idle when nobody has used it for `lease_ttl`, no
/// lease is in flight, and (on Redis) it holds no live partition: dropping it gives nothing up,
/// since a new pool starts with no credit (never more than the dropped one had).
const MAX_POOLS: usize = if cfg!(test) { 100 } else { 10_000 };

/// One key's partitions in this process.
#[derive(Debug, Default)]
struct Pool {
    state: Mutex<PoolState>,
    /// Held by the one call that leases; others go on with what is held.
    leasing: tokio::sync::Mutex<()>,
    /// When a call last took this pool (µs, the set's clock).
    used_at: AtomicU64,
}

#[derive(Debug, Default)]
struct PoolState {
    pacer: Pacer,
    /// When to lease next (µs, the set's clock).
    next_lease_at: u64,
    /// The fair share the last lease call reported.
    target: u32,
    /// The live members of the class the last lease call counted.
    members: u32,
}

fn new_member(pid: u32) -> Arc<str> {
    use std::hash::BuildHasher;
    let random = foldhash::fast::RandomState::default().hash_one((pid, monotonic_micros()));
    format!("{pid:x}-{random:016x}").into()
}

impl PartitionSet {
    /// The leases and pacing of limiter `name` with `params` on `source`.
    pub(crate) fn new(params: Partitions, name: &str, source: Source, clock: Arc<dyn Clock>) -> PartitionSet {
        let (pid, _) = forked_since(0);
        PartitionSet {
            params,
            name: name.into(),
            source,
            manual: clock.is_manual().then(|| clock.clone()),
            clock,
            pid: AtomicU32::new(pid),
            keys: Mutex::new(Keys { member: new_member(pid), pools: HashMap::new() }),
        }
    }

    /// The backend's clock (what `acquire` sleeps by).
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    fn now(&self) -> u64 {
        match &self.manual {
            Some(clock) => clock.now_micros(),
            None => monotonic_micros(),
        }
    }

    /// The key's pool and this process's member id (both fresh after a fork).
    fn pool(&self, key: &str) -> (Arc<Pool>, Arc<str>) {
        let mut keys = self.keys.lock();
        let (pid, forked) = forked_since(self.pid.load(Ordering::Relaxed));
        if forked {
            *keys = Keys { member: new_member(pid), pools: HashMap::new() };
            self.pid.store(pid, Ordering::Relaxed);
        }
        let now = self.now();
        let pool = match keys.pools.get(key) {
            Some(pool) => pool.clone(),
            None => {
                if keys.pools.len() >= MAX_POOLS {
                    self.drop_idle(&mut keys.pools, now);
                }
                let pool = Arc::new(Pool::default());
                if let Source::Memory = self.source {
                    let (first, end) = self.params.pool();
                    let all = (first..end).map(|index| Held { index, token: 1, deadline: u64::MAX }).collect();
                    let mut st = pool.state.lock();
                    st.pacer = Pacer::holding(all, self.now());
                    st.next_lease_at = u64::MAX;
                    st.target = end - first;
                    st.members = 1;
                }
                keys.pools.insert(key.into(), pool.clone());
                pool
            }
        };
        pool.used_at.store(now, Ordering::Relaxed);
        (pool, keys.member.clone())
    }

    /// Drops the idle pools (see [`MAX_POOLS`]) at `now`.
    #[cold]
    fn drop_idle(&self, pools: &mut HashMap<Box<str>, Arc<Pool>>, now: u64) {
        let ttl = self.params.ttl_us;
        pools.retain(|_, pool| {
            let recent = now.saturating_sub(pool.used_at.load(Ordering::Relaxed)) < ttl;
            let Ok(_idle) = pool.leasing.try_lock() else { return true };
            let holding = match self.source {
                Source::Memory => false,
                Source::Redis(_) => pool.state.lock().pacer.held.iter().any(|h| h.deadline > now),
            };
            recent || holding
        });
    }

    /// Decides a check or a peek of `key`; a check leases first when the lease is due (a peek
    /// never does: an operator's look joins no fleet).
    pub(crate) async fn run(&self, key: &str, op: Op) -> Result<Outcome> {
        let (cost, commit) = match op {
            Op::Check { cost, .. } => (cost, true),
            Op::Peek => (1, false),
            _ => return Err(not_applicable(op, &self.params)),
        };
        let (pool, member) = self.pool(key);
        if let (Source::Redis(backend), true) = (&self.source, commit) {
            self.lease_if_due(backend, key, &pool, &member).await?;
        }
        Ok(Outcome::of(self.decide(&pool, cost, commit)))
    }

    /// Blocking form of [`Self::run`]: in memory, and on Redis while no lease is due, decided
    /// on the calling thread.
    pub(crate) fn run_blocking(&self, key: &str, op: Op) -> Result<Outcome> {
        let due = match &self.source {
            Source::Memory => false,
            Source::Redis(_) if matches!(op, Op::Peek) => false,
            Source::Redis(_) => {
                let (pool, _) = self.pool(key);
                let next = pool.state.lock().next_lease_at;
                self.now() >= next
            }
        };
        if due {
            return crate::runtime::block_on(self.run(key, op));
        }
        let (cost, commit) = match op {
            Op::Check { cost, .. } => (cost, true),
            Op::Peek => (1, false),
            _ => return Err(not_applicable(op, &self.params)),
        };
        let (pool, _) = self.pool(key);
        Ok(Outcome::of(self.decide(&pool, cost, commit)))
    }

    fn decide(&self, pool: &Pool, cost: u64, commit: bool) -> Decision {
        let now = self.now();
        let mut st = pool.state.lock();
        let idle_retry = st.next_lease_at.saturating_sub(now).max(1000);
        let mut decision = st.pacer.decide(now, self.params.partition_rate(), cost, commit, idle_retry);
        // Read under the lock, next to the pacer's instant: decisions of one key are stamped in
        // the order they were made.
        decision.decided_at_micros = self.clock.now_micros();
        decision
    }

    /// Leases when due. Fails only when the lease call fails and nothing is held (what is held
    /// is spent until its deadline while Redis is unreachable).
    async fn lease_if_due(&self, backend: &Arc<RedisBackend>, key: &str, pool: &Pool, member: &str) -> Result<()> {
        let rate = self.params.partition_rate();
        let holding = {
            let st = pool.state.lock();
            let now = self.now();
            if now < st.next_lease_at {
                return Ok(());
            }
            st.pacer.held_rate(now, rate) > 0.0
        };
        let _leasing = if holding {
            match pool.leasing.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(()),
            }
        } else {
            pool.leasing.lock().await
        };
        if self.now() < pool.state.lock().next_lease_at {
            return Ok(()); // another call leased while this one waited
        }
        let sent_at = self.now();
        let result = lease::lease(backend, &self.params, &self.name, key, member, sent_at).await;
        let now = self.now();
        let ttl = self.params.ttl_us;
        match result {
            Ok(Granted { target, members, held }) => {
                let mut keep = held;
                let excess: Vec<u32> =
                    keep.split_off((target as usize).min(keep.len())).iter().map(|h| h.index).collect();
                {
                    let mut st = pool.state.lock();
                    let under_share = (keep.len() as u32) < target;
                    st.pacer.replace(now, rate, keep);
                    st.target = target;
                    st.members = members;
                    st.next_lease_at = now + if under_share { ttl / 10 } else { ttl / 3 };
                }
                // Spent no longer (dropped above), so given back; if this fails they lapse.
                if !excess.is_empty() {
                    let _ = lease::release(backend, &self.params, &self.name, key, member, &excess).await;
                }
                Ok(())
            }
            Err(e) => {
                let mut st = pool.state.lock();
                st.next_lease_at = now + ttl / 10;
                if st.pacer.held_rate(now, rate) > 0.0 {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Gives back every partition held for `key` (all keys when `None`); later calls lease anew.
    pub(crate) async fn release(&self, key: Option<&str>) -> Result<()> {
        let (pools, member) = {
            let keys = self.keys.lock();
            let pools: Vec<(Box<str>, Arc<Pool>)> = keys
                .pools
                .iter()
                .filter(|(k, _)| key.map_or(true, |key| &***k == key))
                .map(|(k, p)| (k.clone(), p.clone()))
                .collect();
            (pools, keys.member.clone())
        };
        let Source::Redis(backend) = &self.source else {
            // In memory the process holds every partition for ever: a reset forgets the credit.
            if let Some(key) = key {
                self.keys.lock().pools.remove(key);
            }
            return Ok(());
        };
        let mut result = Ok(());
        for (k, pool) in pools {
            let _leasing = pool.leasing.lock().await;
            let holds = {
                let mut st = pool.state.lock();
                let now = self.now();
                let holds = !st.pacer.held.is_empty();
                st.pacer.replace(now, self.params.partition_rate(), Vec::new());
                st.next_lease_at = 0;
                holds
            };
            if holds {
                if let Err(e) = lease::release(backend, &self.params, &self.name, &k, &member, &[]).await {
                    result = Err(e);
                }
            }
        }
        result
    }

    /// The partitions held for `key` now with their fencing tokens, the fair share and the live
    /// members last reported (memory: every partition of the class, one member) and the rate
    /// the held partitions are worth.
    pub(crate) fn held(&self, key: &str) -> (Vec<(u32, u64)>, u32, u32, f64) {
        let (pool, _) = self.pool(key);
        let now = self.now();
        let st = pool.state.lock();
        let held = st.pacer.held.iter().filter(|h| h.deadline > now).map(|h| (h.index, h.token)).collect();
        (held, st.target, st.members, st.pacer.held_rate(now, self.params.partition_rate()))
    }
}

impl Drop for PartitionSet {
    /// Gives back what is still held, in the background (best effort: what is not given back
    /// lapses after `lease_ttl`).
    fn drop(&mut self) {
        let Source::Redis(backend) = &self.source else { return };
        let (_, forked) = forked_since(self.pid.load(Ordering::Relaxed));
        if forked {
            return;
        }
        let keys = std::mem::take(&mut *self.keys.lock());
        let held: Vec<Box<str>> =
            keys.pools.into_iter().filter(|(_, p)| !p.state.lock().pacer.held.is_empty()).map(|(k, _)| k).collect();
        if held.is_empty() {
            return;
        }
        let (backend, params, name, member) = (backend.clone(), self.params, self.name.clone(), keys.member);
        runtime().spawn(async move {
            for key in held {
                let _ = lease::release(&backend, &params, &name, &key, &member, &[]).await;
            }
        });
    }
}

/// Where a partitions limiter built on `backend` leases.
pub(crate) fn partition_source(backend: &crate::backend::BackendInner) -> Source {
    match backend {
        crate::backend::BackendInner::Memory(_) => Source::Memory,
        crate::backend::BackendInner::Redis(redis) => Source::Redis(redis.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use ratekeeper_test_support::RedisServer;

    use super::MAX_POOLS;
    use crate::limiter::Target;
    use crate::{Backend, Limiter, ManualClock, MemoryConfig, RedisConfig};

    fn pools(limiter: &Limiter) -> usize {
        let Target::Partitions(set) = &limiter.inner.target else { panic!("a partitions limiter") };
        set.keys.lock().pools.len()
    }

    /// Keys used once and then left alone do not accumulate: once the set holds [`MAX_POOLS`]
    /// pools, the idle ones (unused for `lease_ttl`, and on Redis holding no live partition)
    /// are dropped; pools in use are kept. On memory and on a real Redis server. (Before, a
    /// pool was never dropped: one per key the process ever saw.)
    #[test]
    fn idle_pools_are_dropped() {
        let server = RedisServer::start();
        let clock = ManualClock::new(1_800_000_000_000_000);
        let memory = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap();
        let redis =
            Backend::redis_with(RedisConfig::new(server.url()).prefix("pools").clock(Arc::new(clock.clone()))).unwrap();
        let ttl = Duration::from_secs(2);
        for backend in [memory, redis] {
            let limiter = backend.partitions("paced", 1000.0, 4, ttl, 0, false).unwrap();
            for i in 0..MAX_POOLS {
                limiter.check_blocking(Some(&format!("old{i}")), 1).unwrap();
            }
            assert_eq!(pools(&limiter), MAX_POOLS);
            // Still in use: a new key finds no idle pool to drop.
            limiter.check_blocking(Some("busy"), 1).unwrap();
            assert_eq!(pools(&limiter), MAX_POOLS + 1);
            clock.advance(ttl * 2);
            limiter.check_blocking(Some("new"), 1).unwrap();
            assert!(pools(&limiter) <= 2, "{} pools held after the old keys went idle", pools(&limiter));
            clock.advance(ttl * 2);
        }
    }
}
