//! The in-process side of a leased token bucket on Redis: each key's tokens are taken from the
//! shared bucket in leases (one round trip each, `leased.lua`) and spent here with one atomic
//! subtraction.
//!
//! The rules that keep the fleet within the bucket:
//! - a process spends only tokens Redis granted it, each at most once (an atomic counter);
//! - unspent tokens are taken out of the counter (an atomic swap) before they are given back,
//!   so none is both spent and given back; each give-back names its lease, whose entry Redis
//!   deletes, so a give-back is applied at most once and never exceeds the grant;
//! - a call whose reply is lost (Redis failing mid-call) is never replayed: a grant it may have
//!   made, or tokens it may have given back, are simply not used here (under-use, never
//!   over-use);
//! - a lease's tokens may be spent until it lapses (`lease_ttl` after it was asked for), and
//!   are given back at the next round trip or at [`Limiter::close`] while Redis still knows the
//!   lease.
//!
//! How much a lease asks for adapts: it starts at `chunk`, halves when a lease lapsed with
//! tokens unspent, and doubles back up to `chunk` when a lease was used up; Redis grants at most
//! half of what the bucket holds (never less than the call's cost), so one process never
//! takes everything.
//!
//! A refusal from Redis is remembered until its `retry_after`: until then calls of the same or
//! a larger cost are refused here without a round trip (nothing but time admits them sooner,
//! short of another process giving tokens back, which this only under-uses).
//!
//! Fork-safe: a forked child starts with no lease (see [`LeasePool::after_fork`]): it neither
//! spends nor gives back its parent's grant, draws lease ids of its own, and never waits for a
//! round trip its parent had in flight when it forked.
//!
//! Lapses and remembered refusals are local deadlines, kept on a monotonic clock (with the
//! system clock, the CPU counter's monotonic reading, `backend::wall_clock`; else
//! [`LocalClock`]): a wall clock stepped back by NTP neither keeps a key refused for as long
//! as the step nor lets a lease be spent past `lease_ttl` (a manual clock stands in for it in
//! tests). Decisions still carry the wall-clock instant they were made at.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use crate::backend::redis::leased_blocks::BlockWatcher;
use crate::backend::wall_clock::Readings;
use crate::backend::RedisBackend;
use crate::clock::{Clock, LocalClock, SystemClock};
use crate::decision::{Decision, SettleTicket};
use crate::engine::leased::Leased;
use crate::engine::{decision, Algorithm, Colocate, Op, Outcome, Served};
use crate::error::Result;
use crate::metrics::Counter;
use crate::observe::Call as Timed;
use crate::padded::KeyBytes;
use crate::params::micros;
use crate::runtime::forked_since;
use crate::SettleKey;

use super::pipeline::Call;
use super::{Limiter, Target};

/// The most keys whose leases a limiter keeps (fewer in this crate's tests, so that they reach
/// it quickly).
const MAX_KEYS: usize = if cfg!(test) { 100 } else { 10_000 };

/// The leases of one limiter in this process, by key.
#[derive(Debug)]
pub(crate) struct LeasePool {
    /// The key `""` (no key), the commonest, without a map lookup.
    unkeyed: Arc<Slot>,
    /// Every other key's slot. Hashed with foldhash, as the memory backend's keys are: std's
    /// SipHash was the larger part of a keyed spend.
    keyed: RwLock<HashMap<Box<str>, Arc<Slot>, foldhash::fast::RandomState>>,
    /// The limiter's parameters.
    leased: Leased,
    /// The backend's clock: the wall-clock instant decisions carry.
    clock: Arc<dyn Clock>,
    /// Whether `clock` is the system clock, read as the memory backend reads it (see
    /// `backend::wall_clock`): a spend from a lease reads two clocks (its deadlines' and its
    /// decision's instant), then both from one reading of the CPU's counter; a `clock_gettime`
    /// per reading was the larger part of a spend.
    system_clock: bool,
    /// The clock of the slots' deadlines (see the module documentation).
    local: LocalClock,
    /// The process the slots belong to (see [`LeasePool::after_fork`]).
    pid: AtomicU32,
    /// Serialises the reset of a forked child's slots.
    forking: parking_lot::Mutex<()>,
    /// The limiter's name and where its keys take their hash tag from (to read their blocks).
    name: Box<str>,
    colocate: Colocate,
}

/// One key's lease.
#[derive(Debug)]
struct Slot {
    /// Tokens granted and not yet spent.
    tokens: AtomicU64,
    /// When the current lease lapses (µs, the pool's local clock).
    lapses_at: AtomicU64,
    /// When the shared bucket was full again, as of the last grant (µs, the local clock).
    full_at: AtomicU64,
    /// When Redis granted the current lease (µs, Redis's clock; 0: unknown): the instant a
    /// spend's settle ticket carries, by which a refund finds the lease (see `leased.lua`).
    granted_at: AtomicU64,
    /// A block holds until this instant (µs, the local clock): set by a block from this
    /// process at once, and from others' when the live task reads it (see
    /// `backend::redis::leased_blocks`). The lease's tokens are kept for after it.
    blocked_until: AtomicU64,
    /// A refusal from Redis holds until this instant (µs, the local clock) for calls of at
    /// least `refused_cost`.
    refused_until: AtomicU64,
    refused_cost: AtomicU64,
    /// Serialises round trips: one at a time per key; others wait for it, then spend locally.
    /// Behind a short-held lock so that a forked child can replace it: a round trip in flight
    /// in the parent when it forked holds the old one forever in the child.
    lease: parking_lot::Mutex<Arc<tokio::sync::Mutex<LeaseState>>>,
}

#[derive(Debug)]
struct LeaseState {
    /// The lease the tokens belong to (0: none).
    id: u64,
    /// How many tokens the next lease asks for.
    want: u64,
}

/// What a spend from a lease leaves: the lease's tokens, how long until the shared bucket is
/// full again (µs), and when the lease was granted (Redis's clock), if known.
struct Spent {
    remaining: u64,
    reset_us: u64,
    charged_at: Option<u64>,
}

/// A lease id, unique in practice across every process of a fleet: a give-back names its lease,
/// and a collision would give back into (and so wipe) another process's lease. See
/// [`lease_id`]. (Lua reads it as a string: every bit of the 64 is used.)
fn next_lease_id() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    use std::hash::BuildHasher;
    let seed = *SEED.get_or_init(|| foldhash::fast::RandomState::default().hash_one(SystemClock.now_micros()));
    let (pid, _) = forked_since(0);
    lease_id(seed, pid, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The lease id number `counter` of the process `pid` whose random seed is `seed`: SplitMix64
/// of the counter from a 64-bit starting point of the process's own (its seed and pid: a forked
/// child, which inherits its parent's seed and counter, starts elsewhere). SplitMix64 is a
/// bijection of the counter, so one process never repeats an id; two processes' ids are
/// independent 64-bit values, which collide about once in 2^64 pairs (never 0, which names no
/// lease).
fn lease_id(seed: u64, pid: u32, counter: u64) -> u64 {
    use std::hash::BuildHasher;
    let start = foldhash::fast::FixedState::with_seed(seed).hash_one(pid);
    let mut z = start.wrapping_add(counter.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

impl Slot {
    fn new(want: u64) -> Slot {
        Slot {
            tokens: AtomicU64::new(0),
            lapses_at: AtomicU64::new(0),
            full_at: AtomicU64::new(0),
            granted_at: AtomicU64::new(0),
            blocked_until: AtomicU64::new(0),
            refused_until: AtomicU64::new(0),
            refused_cost: AtomicU64::new(u64::MAX),
            lease: parking_lot::Mutex::new(Arc::new(tokio::sync::Mutex::new(LeaseState { id: 0, want }))),
        }
    }

    /// The lock of this key's round trips.
    fn lease_lock(&self) -> Arc<tokio::sync::Mutex<LeaseState>> {
        self.lease.lock().clone()
    }

    /// Forgets everything a parent process held (in a forked child).
    fn forget(&self, want: u64) {
        self.tokens.store(0, Ordering::Release);
        self.lapses_at.store(0, Ordering::Release);
        self.full_at.store(0, Ordering::Release);
        self.granted_at.store(0, Ordering::Release);
        self.blocked_until.store(0, Ordering::Release);
        self.refused_until.store(0, Ordering::Release);
        self.refused_cost.store(u64::MAX, Ordering::Release);
        *self.lease.lock() = Arc::new(tokio::sync::Mutex::new(LeaseState { id: 0, want }));
    }
}

impl LeasePool {
    pub(crate) fn new(leased: Leased, clock: Arc<dyn Clock>, name: &str, colocate: Colocate) -> LeasePool {
        let local = LocalClock::beside(&clock);
        let system_clock = Arc::ptr_eq(&clock, &crate::backend::memory::system_clock());
        if system_clock {
            crate::backend::wall_clock::prepare();
        }
        let (pid, _) = forked_since(0);
        LeasePool {
            unkeyed: Arc::new(Slot::new(leased.chunk)),
            keyed: RwLock::default(),
            leased,
            clock,
            system_clock,
            local,
            pid: AtomicU32::new(pid),
            forking: parking_lot::Mutex::new(()),
            name: name.into(),
            colocate,
        }
    }

    /// In a forked child (checked on every use: two relaxed loads), forgets the parent's
    /// leases: their tokens are the parent's to spend or give back, and a round trip the parent
    /// had in flight never completes here.
    #[inline]
    fn after_fork(&self) {
        let (pid, forked) = forked_since(self.pid.load(Ordering::Acquire));
        if forked {
            self.forget_parent(pid);
        }
    }

    /// The wall-clock instant a decision carries, now.
    #[inline(always)]
    fn wall_micros(&self) -> u64 {
        if self.system_clock {
            crate::backend::wall_clock::now_micros()
        } else {
            self.clock.now_micros()
        }
    }

    /// Now on the clock of the slots' deadlines: with the system clock, the counter's monotonic
    /// reading (`backend::wall_clock`: a `clock_gettime` of the monotonic clock was the larger
    /// part of a spend from a lease), else [`LocalClock`]. Every reading of the pool's local
    /// clock goes through here, so that its deadlines are compared on one clock.
    #[inline(always)]
    fn local_now(&self) -> u64 {
        if self.system_clock {
            crate::backend::wall_clock::monotonic_micros()
        } else {
            self.local.now_micros()
        }
    }

    /// [`LeasePool::local_now`] and [`LeasePool::wall_micros`] at once (one reading of the
    /// counter with the system clock).
    #[inline(always)]
    fn now_both(&self) -> Readings {
        if self.system_clock {
            crate::backend::wall_clock::now_both()
        } else {
            Readings { monotonic: self.local.now_micros(), wall: self.clock.now_micros() }
        }
    }

    #[cold]
    fn forget_parent(&self, pid: u32) {
        let _forking = self.forking.lock();
        if self.pid.load(Ordering::Acquire) == pid {
            return;
        }
        self.unkeyed.forget(self.leased.chunk);
        self.keyed.write().unwrap_or_else(|e| e.into_inner()).clear();
        self.pid.store(pid, Ordering::Release);
    }

    #[inline]
    fn slot(&self, key: &str) -> Arc<Slot> {
        self.after_fork();
        if key.is_empty() {
            return self.unkeyed.clone();
        }
        if let Some(slot) = self.keyed.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return slot.clone();
        }
        let mut keyed = self.keyed.write().unwrap_or_else(|e| e.into_inner());
        if keyed.len() >= MAX_KEYS && !keyed.contains_key(key) {
            self.make_room(&mut keyed);
        }
        keyed.entry(key.into()).or_insert_with(|| Arc::new(Slot::new(self.leased.chunk))).clone()
    }

    /// Brings a full per-key map below [`MAX_KEYS`]: the keys that hold nothing this process
    /// still uses (no live lease with tokens, no block or refusal it still answers) go first;
    /// if every key holds a live lease, the leases that lapse soonest go, down to nine tenths
    /// of the cap. Their unspent tokens are not spent here (under-use, never over-use) and lapse
    /// with the lease; a later call of such a key takes a new lease. (A caller already holding
    /// a dropped slot spends from it as granted.)
    #[cold]
    fn make_room(&self, keyed: &mut HashMap<Box<str>, Arc<Slot>, foldhash::fast::RandomState>) {
        let now = self.local_now();
        keyed.retain(|_, slot| {
            (slot.tokens.load(Ordering::Relaxed) > 0 && slot.lapses_at.load(Ordering::Relaxed) > now)
                || slot.blocked_until.load(Ordering::Relaxed) > now
                || slot.refused_until.load(Ordering::Relaxed) > now
        });
        if keyed.len() < MAX_KEYS {
            return;
        }
        let mut lapses: Vec<u64> = keyed.values().map(|s| s.lapses_at.load(Ordering::Relaxed)).collect();
        let cut = keyed.len() - MAX_KEYS * 9 / 10;
        let (_, &mut threshold, _) = lapses.select_nth_unstable(cut - 1);
        keyed.retain(|_, slot| slot.lapses_at.load(Ordering::Relaxed) > threshold);
    }

    /// [`LeasePool::spend_unblocked`] on `key`'s slot, under the map's read lock (no reference
    /// to the slot is counted, which cost two atomic writes to a shared line per spend); `None`
    /// when the key has no slot yet (the general path makes it).
    #[inline]
    fn spend_keyed(&self, key: &str, cost: u64, now: u64) -> Option<Spent> {
        let keyed = self.keyed.read().unwrap_or_else(|e| e.into_inner());
        self.spend_unblocked(keyed.get(key)?, cost, now)
    }

    /// Every key's slot, for closing.
    fn slots(&self) -> Vec<(Box<str>, Arc<Slot>)> {
        self.after_fork();
        let keyed = self.keyed.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = keyed.iter().map(|(k, s)| (k.clone(), s.clone())).collect();
        all.push(("".into(), self.unkeyed.clone()));
        all
    }

    /// Takes `cost` from `slot`'s lease if it is current (`now`, the local clock) and holds
    /// that many: the one place a lease's tokens are spent.
    #[inline(always)]
    fn spend(slot: &Slot, cost: u64, now: u64) -> Option<Spent> {
        if now >= slot.lapses_at.load(Ordering::Acquire) {
            return None;
        }
        // Read before the spend: if a renewal lands in between, this is the older grant, whose
        // lease a refund gives back to no more generously (its low is no higher).
        let granted_at = slot.granted_at.load(Ordering::Acquire);
        let mut tokens = slot.tokens.load(Ordering::Relaxed);
        while tokens >= cost {
            match slot.tokens.compare_exchange_weak(tokens, tokens - cost, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    return Some(Spent {
                        remaining: tokens - cost,
                        reset_us: slot.full_at.load(Ordering::Relaxed).saturating_sub(now),
                        charged_at: (granted_at != 0).then_some(granted_at),
                    })
                }
                Err(now_held) => tokens = now_held,
            }
        }
        None
    }

    /// [`LeasePool::spend`] unless `slot`'s key is blocked at `now` (the local clock).
    #[inline(always)]
    fn spend_unblocked(&self, slot: &Slot, cost: u64, now: u64) -> Option<Spent> {
        if now < slot.blocked_until.load(Ordering::Acquire) {
            return None;
        }
        Self::spend(slot, cost, now)
    }

    /// Spends `cost` from `slot`'s lease, or answers from a remembered refusal; `None` when it
    /// takes a round trip. `now` is on the local clock. A spend's outcome carries when its
    /// lease was granted.
    #[inline]
    fn local(&self, slot: &Slot, cost: u64, now: u64) -> Option<Outcome> {
        self.after_fork();
        let blocked_until = slot.blocked_until.load(Ordering::Acquire);
        if now < blocked_until {
            let retry = blocked_until - now;
            let mut d = decision(false, self.leased.gcra.capacity, 0, retry, retry);
            d.decided_at_micros = self.wall_micros();
            return Some(Outcome { blocked: true, held: true, ..Outcome::of(d) });
        }
        if let Some(spent) = Self::spend(slot, cost, now) {
            let mut d = decision(true, self.leased.gcra.capacity, spent.remaining, 0, spent.reset_us);
            d.decided_at_micros = self.wall_micros();
            return Some(Outcome { charged_at: spent.charged_at, ..Outcome::of(d) });
        }
        let until = slot.refused_until.load(Ordering::Acquire);
        if now < until && cost >= slot.refused_cost.load(Ordering::Relaxed) {
            let reset_us = slot.full_at.load(Ordering::Relaxed).saturating_sub(now).max(until - now);
            let mut d = decision(false, self.leased.gcra.capacity, 0, until - now, reset_us);
            d.decided_at_micros = self.wall_micros();
            return Some(Outcome::of(d));
        }
        None
    }
}

impl Limiter {
    /// A leased check (the pipeline's engine call): spent from this process's lease when it
    /// holds enough, else one round trip that gives back what is left and takes a new lease
    /// (with the parameters of `call`'s override, if any). The lease's bookkeeping follows what
    /// the bucket decides: a refusal is remembered even when a policy turns it into an
    /// admission after.
    pub(crate) async fn leased_check(
        &self,
        pool: &LeasePool,
        key: &str,
        cost: u64,
        call: &mut Call,
    ) -> Result<Outcome> {
        let slot = pool.slot(key);
        if let Some(outcome) = pool.local(&slot, cost, pool.local_now()) {
            return Ok(outcome);
        }
        let lease_lock = slot.lease_lock();
        let mut lease = lease_lock.lock().await;
        // Another caller may have taken a lease while this one waited.
        if let Some(outcome) = pool.local(&slot, cost, pool.local_now()) {
            return Ok(outcome);
        }
        let Target::Redis { backend, failover } = &self.inner.target else {
            // A lease pool is only built for a limiter on Redis.
            return Ok(Outcome::of(Decision::unlimited()));
        };
        // A live override's parameters apply from this lease on.
        call.went_to_redis();
        let algorithm = call.algorithm(self);
        let failover = Self::failover_for(failover, call.over.as_deref());
        let (chunk, lease_us) = match algorithm {
            Algorithm::Leased(l) => (l.chunk, l.lease_us),
            _ => (pool.leased.chunk, pool.leased.lease_us),
        };
        let now = pool.local_now();
        let lapsed = now >= slot.lapses_at.load(Ordering::Acquire);
        // Taken out before the call: from here they can only be given back, never spent.
        let back = slot.tokens.swap(0, Ordering::AcqRel);
        lease.want = match (back, lapsed) {
            (0, _) => lease.want.saturating_mul(2),
            (_, true) => lease.want / 2,
            _ => lease.want,
        }
        .clamp(1, chunk);
        let lease_id = next_lease_id();
        // The lease being replaced is named even when it was used up (nothing to give back):
        // Redis then knows its entry is kept only for settles' refunds, and keeps a bounded
        // number of those (leased.lua), so the table every grant reads grows with the holders,
        // not with their renewals.
        let op = Op::Take { cost, want: lease.want.max(cost), lease_id, back_id: lease.id, back };
        lease.id = 0;
        let outcome = backend.execute(self.kind(), &self.inner.name, key, algorithm, &failover, op).await?;
        let d = &outcome.decision;
        if outcome.served != Served::Backend {
            // The failure policy decided this one call; no lease is held.
            return Ok(outcome);
        }
        if d.allowed {
            lease.id = lease_id;
            // Before the tokens: a spender that takes them reads this grant's instant or an
            // older one (see `LeasePool::local`).
            slot.granted_at.store(d.decided_at_micros, Ordering::Release);
            slot.full_at.store(now.saturating_add(micros(d.reset_after)), Ordering::Relaxed);
            slot.tokens.store(outcome.granted.saturating_sub(cost), Ordering::Release);
            slot.lapses_at.store(now.saturating_add(lease_us), Ordering::Release);
            let mut outcome = outcome;
            outcome.decision.remaining = outcome.granted.saturating_sub(cost);
            outcome.charged_at = Some(outcome.decision.decided_at_micros);
            return Ok(outcome);
        }
        slot.refused_cost.store(cost, Ordering::Relaxed);
        slot.refused_until.store(now.saturating_add(micros(d.retry_after)), Ordering::Release);
        Ok(outcome)
    }

    /// A leased check answered from this process's lease of `key` (or a block or refusal it
    /// knows of), if it can be without a round trip.
    #[inline]
    pub(crate) fn leased_in_process(&self, pool: &LeasePool, key: &str, cost: u64) -> Option<Outcome> {
        let slot = if key.is_empty() { pool.unkeyed.clone() } else { pool.slot(key) };
        pool.local(&slot, cost, pool.local_now())
    }

    /// An admitted spend from this process's lease of `key`, if it holds `cost` (no refusal:
    /// a caller that may wait goes on to `acquire`).
    #[inline]
    pub(crate) fn leased_spend(&self, pool: &LeasePool, key: &str, cost: u64) -> Option<Decision> {
        let started = self.inner.observe.start();
        let slot = if key.is_empty() { pool.unkeyed.clone() } else { pool.slot(key) };
        let outcome = pool.local(&slot, cost, pool.local_now()).filter(|o| o.decision.allowed)?;
        self.inner.metrics.add(Counter::Allowed, 1);
        self.time(Timed::Check, Counter::Allowed, started);
        Some(self.ticketed_at(outcome.decision, Served::Backend, key, cost, outcome.charged_at))
    }

    /// The fast path of a leased check (validated `key` and `cost`): a spend from this
    /// process's lease, built in place, when nothing unusual applies — the same conditions as the
    /// memory backend's fast path (see `limiter::fast`), and the key not blocked. `None`: the
    /// general path decides, exactly as before (a refusal, a round trip, a hold, an override, a
    /// policy with something to do).
    #[inline(always)]
    pub(crate) fn fast_leased(&self, key: &str, cost: u64) -> Option<Decision> {
        let inner = &*self.inner;
        let pool = inner.pool.as_deref()?;
        // An observed check is timed on the general path (`observe.rs`).
        if !self.nothing_unusual() || inner.observe.on() {
            return None;
        }
        pool.after_fork();
        let Readings { monotonic: now, wall: decided_at } = pool.now_both();
        let spent = if key.is_empty() {
            pool.spend_unblocked(&pool.unkeyed, cost, now)
        } else {
            pool.spend_keyed(key, cost, now)
        }?;
        inner.metrics.add(Counter::Allowed, 1);
        // Built field by field in the caller's return slot, once per kind of settle key, as the
        // memory fast path builds its decision (see `limiter::fast`): a key made by a branch and
        // put in once was stored in words and read back whole, which the CPU cannot forward.
        let decision = |settle: Option<SettleTicket>| Decision {
            allowed: true,
            limit: pool.leased.gcra.capacity,
            remaining: spent.remaining,
            retry_after: Duration::ZERO,
            reset_after: Duration::from_micros(spent.reset_us),
            lease: None,
            decided_at_micros: decided_at,
            limits: None,
            settle,
            shadow_refused: false,
        };
        let limiter = inner.settle_identity;
        if limiter == 0 {
            return Some(decision(None));
        }
        let id = self.next_settle_id();
        let charged_at_micros = spent.charged_at.unwrap_or(decided_at);
        let ticket = |key: SettleKey| SettleTicket { key, cost, charged_at_micros, id, limiter };
        Some(match KeyBytes::new(key.as_bytes()) {
            KeyBytes::Short(short) => decision(Some(ticket(SettleKey::of_short(short)))),
            KeyBytes::Long(_) => decision(Some(ticket(key.into()))),
        })
    }

    /// Answers a check without any I/O when this process can: on the memory backend, for
    /// `unlimited`, and for a leased limiter from its own lease (or a refusal it remembers).
    /// `Ok(None)`: the check needs a round trip ([`Limiter::check`] makes it). Arguments are
    /// validated first, as by `check`.
    #[inline]
    pub fn check_local(&self, key: Option<&str>, cost: u64) -> Result<Option<Decision>> {
        // The fast paths first, as `check_blocking` takes them.
        let key = self.validate_check(key, cost)?;
        if let Some(decision) = self.fast_check(key, cost).or_else(|| self.fast_leased(key, cost)) {
            return Ok(Some(decision));
        }
        let op = self.check_op_of(cost);
        let Some(outcome) = self.answer_in_process(key, op) else { return Ok(None) };
        Ok(Some(self.ticketed_granted(outcome?, None, key, cost)))
    }

    /// The blocking form of [`Limiter::leased_check`]: a local spend involves no runtime.
    #[inline]
    pub(crate) fn leased_check_blocking(
        &self,
        pool: &LeasePool,
        key: &str,
        cost: u64,
        call: &mut Call,
    ) -> Result<Outcome> {
        if key.is_empty() {
            if let Some(outcome) = pool.local(&pool.unkeyed, cost, pool.local_now()) {
                return Ok(outcome);
            }
        }
        crate::runtime::block_on(self.leased_check(pool, key, cost, call))
    }

    /// Gives every lease's unspent tokens back to the shared bucket (see [`Limiter::close`]). A
    /// give-back whose reply is lost is not sent again: those tokens stay unused until Redis
    /// forgets the lease.
    pub(crate) async fn close_leases(&self) -> Result<()> {
        let (Some(pool), Target::Redis { backend, failover }) = (&self.inner.pool, &self.inner.target) else {
            return Ok(());
        };
        let mut first_error = None;
        for (key, slot) in pool.slots() {
            let lease_lock = slot.lease_lock();
            let mut lease = lease_lock.lock().await;
            let back = slot.tokens.swap(0, Ordering::AcqRel);
            let id = std::mem::take(&mut lease.id);
            if back == 0 || id == 0 {
                continue;
            }
            let op = Op::GiveBack { lease_id: id, tokens: back };
            let algorithm = &self.inner.algorithm;
            if let Err(e) = backend.execute(self.kind(), &self.inner.name, &key, algorithm, failover, op).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Forgets the refusal from Redis this process remembers for `key` (after a settle, whose
    /// refund may admit it sooner).
    pub(crate) fn forget_leased_refusal(&self, key: &str) {
        if let Some(pool) = &self.inner.pool {
            pool.slot(key).refused_until.store(0, Ordering::Release);
        }
    }

    /// Applies a block of `key` this process made (`None`: an unblock) to its lease at once;
    /// other processes' leases learn of it from the live task.
    pub(crate) fn block_lease(&self, key: &str, block: Option<Duration>) {
        if let Some(pool) = &self.inner.pool {
            let until = block.map_or(0, |d| pool.local_now().saturating_add(micros(d)));
            pool.slot(key).blocked_until.store(until, Ordering::Release);
        }
    }

    /// Forgets `key`'s lease (after a reset deleted it in Redis).
    pub(crate) fn forget_lease(&self, key: &str) {
        if let Some(pool) = &self.inner.pool {
            let slot = pool.slot(key);
            slot.tokens.store(0, Ordering::Release);
            slot.refused_until.store(0, Ordering::Release);
        }
    }
}

/// The lease pool of a limiter `name` built on `backend`, if it is a leased one; the backend
/// keeps its held keys' blocks up to date.
pub(crate) fn pool_for(
    algorithm: &Algorithm,
    backend: &RedisBackend,
    name: &str,
    colocate: Colocate,
) -> Option<Arc<LeasePool>> {
    let Algorithm::Leased(leased) = algorithm else { return None };
    let pool = Arc::new(LeasePool::new(*leased, backend.fallback.clock.clone(), name, colocate));
    let watcher: Arc<dyn BlockWatcher> = pool.clone();
    backend.watchers.watch(Arc::downgrade(&watcher));
    Some(pool)
}

impl BlockWatcher for LeasePool {
    fn identity(&self) -> (&str, Colocate) {
        (&self.name, self.colocate)
    }

    fn watched_keys(&self) -> Vec<Box<str>> {
        let watched =
            |slot: &Slot| slot.tokens.load(Ordering::Relaxed) > 0 || slot.blocked_until.load(Ordering::Relaxed) > 0;
        self.slots().into_iter().filter(|(_, slot)| watched(slot)).map(|(key, _)| key).collect()
    }

    fn forget_refused(&self, key: Option<&str>) {
        match key {
            Some(key) => self.slot(key).refused_until.store(0, Ordering::Release),
            None => self.slots().iter().for_each(|(_, slot)| slot.refused_until.store(0, Ordering::Release)),
        }
    }

    fn block_read(&self, key: &str, until_micros: Option<u64>) {
        let left = until_micros.map_or(0, |until| until.saturating_sub(self.clock.now_micros()));
        let until = if left == 0 { 0 } else { self.local_now().saturating_add(left) };
        self.slot(key).blocked_until.store(until, Ordering::Release);
    }
}

#[cfg(test)]
#[path = "leased_tests.rs"]
mod tests;
