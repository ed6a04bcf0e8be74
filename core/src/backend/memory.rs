//! The embedded memory backend: per process, thread-safe, sharded, bounded.
//!
//! Every (kind, name) pair is interned to a small namespace id at limiter creation, so the hot
//! path hashes `(namespace, key)` once, locks one shard and touches one table slot, allocating
//! only when a key is seen for the first time. Each slot records the instant after which its
//! state equals an empty one; such slots are swept incrementally as keys are inserted, and all at
//! once before a full backend refuses a new key (live state is never dropped to make room).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashTable;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::limiter::concurrent::{ConcurrentState, Released};
use crate::limiter::log::LogState;
use crate::limiter::sliding::SlidingState;
use crate::limiter::{Algorithm, Evaluation, Kind};

/// Configuration of a memory backend.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// The most keys held at once (default 1,000,000). When full, expired state is dropped first;
    /// if none is expired, new keys are refused with [`Error::BackendUnavailable`].
    pub max_keys: usize,
    /// Lock shards (rounded up to a power of two; default 64).
    pub shards: usize,
    /// Where time comes from (default: the system clock).
    pub clock: Arc<dyn Clock>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig { max_keys: 1_000_000, shards: 64, clock: Arc::new(SystemClock) }
    }
}

impl MemoryConfig {
    /// Sets `max_keys`.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Sets the clock (a [`crate::ManualClock`] in tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the number of shards.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }
}

/// Per-key state of any engine.
enum State {
    Gcra(u64),
    Sliding(SlidingState),
    Log(LogState),
    /// The notifier wakes one waiter per freed slot.
    Concurrent(ConcurrentState, Arc<Notify>),
}

impl State {
    fn fresh(algorithm: &Algorithm) -> State {
        match algorithm {
            Algorithm::Gcra(_) => State::Gcra(0),
            Algorithm::Sliding(_) => State::Sliding(Vec::new()),
            Algorithm::Log(_) => State::Log(LogState::default()),
            Algorithm::Concurrent(_) | Algorithm::Unlimited => State::Concurrent(ConcurrentState::default(), Arc::new(Notify::new())),
        }
    }

    fn expires_at(&self, algorithm: &Algorithm) -> u64 {
        match (algorithm, self) {
            (Algorithm::Gcra(g), State::Gcra(tat)) => g.expires_at(tat),
            (Algorithm::Sliding(s), State::Sliding(state)) => s.expires_at(state),
            (Algorithm::Log(l), State::Log(state)) => l.expires_at(state),
            (Algorithm::Concurrent(c), State::Concurrent(state, _)) => c.expires_at(state),
            _ => 0,
        }
    }
}

struct Slot {
    hash: u64,
    namespace: u32,
    key: Box<str>,
    expires_at: u64,
    state: State,
}

#[derive(Default)]
struct Shard {
    table: HashTable<Slot>,
    inserts_since_sweep: usize,
}

impl Shard {
    /// Drops every slot whose state has expired; returns how many.
    fn sweep(&mut self, now: u64) -> usize {
        let before = self.table.len();
        self.table.retain(|slot| slot.expires_at > now);
        self.inserts_since_sweep = 0;
        before - self.table.len()
    }
}

/// Keeps each shard's lock on its own cache line.
#[repr(align(128))]
struct Padded<T>(T);

/// What an operation on one key produced.
pub(crate) struct Outcome {
    pub decision: Decision,
    /// Set when a concurrent limiter refused: notified when a slot is freed.
    pub wake: Option<Arc<Notify>>,
}

/// An operation on one key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// Consume `cost` (for concurrent limiters: grant lease `lease_id`).
    Check { cost: u64, lease_id: u128 },
    /// Report without consuming.
    Peek,
    /// Correct a GCRA charge from `estimate` to `actual`.
    Adjust { estimate: u64, actual: u64 },
    /// Free a concurrent lease.
    Release { lease_id: u128 },
}

/// The memory backend. See the module documentation.
pub(crate) struct MemoryBackend {
    shards: Box<[Padded<Mutex<Shard>>]>,
    shard_shift: u32,
    len: AtomicUsize,
    max_keys: usize,
    hasher: foldhash::fast::RandomState,
    namespaces: Mutex<HashMap<(Kind, Box<str>), u32>>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend").field("len", &self.len()).field("max_keys", &self.max_keys).finish()
    }
}

impl MemoryBackend {
    pub(crate) fn new(config: MemoryConfig) -> Result<Self> {
        if config.max_keys == 0 {
            return Err(Error::invalid("max_keys", "must be at least 1"));
        }
        if config.shards == 0 || config.shards > 1 << 16 {
            return Err(Error::invalid("shards", "must be between 1 and 65536"));
        }
        let shards = config.shards.next_power_of_two();
        Ok(MemoryBackend {
            shards: (0..shards).map(|_| Padded(Mutex::new(Shard::default()))).collect(),
            shard_shift: 64 - shards.trailing_zeros(),
            len: AtomicUsize::new(0),
            max_keys: config.max_keys,
            hasher: foldhash::fast::RandomState::default(),
            namespaces: Mutex::new(HashMap::new()),
            clock: config.clock,
        })
    }

    /// Keys currently held (expired ones included until swept).
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The namespace id of a (kind, name) pair, the same for every limiter built with it.
    pub(crate) fn namespace(&self, kind: Kind, name: &str) -> u32 {
        let mut namespaces = self.namespaces.lock();
        let next = namespaces.len() as u32;
        *namespaces.entry((kind, name.into())).or_insert(next)
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // Top bits choose the shard; hashbrown uses the low and top-7 bits within it, which is
        // fine: shards only see their own keys.
        let index = if self.shard_shift == 64 { 0 } else { (hash >> self.shard_shift) as usize };
        &self.shards[index].0
    }

    /// Runs `op` on the state of (`namespace`, `key`).
    pub(crate) fn execute(&self, namespace: u32, key: &str, algorithm: &Algorithm, op: Op) -> Result<Outcome> {
        let now = self.clock.now_micros();
        let hash = self.hasher.hash_one((namespace, key));
        let mut swept = false;
        loop {
            let mut shard = self.shard(hash).lock();
            if let Some(slot) = shard.table.find_mut(hash, |s| s.namespace == namespace && *s.key == *key) {
                let (outcome, changed) = apply(algorithm, &mut slot.state, now, op)?;
                if changed {
                    slot.expires_at = slot.state.expires_at(algorithm);
                }
                return Ok(outcome);
            }
            let mut state = State::fresh(algorithm);
            let (outcome, changed) = apply(algorithm, &mut state, now, op)?;
            let expires_at = state.expires_at(algorithm);
            if !changed || expires_at <= now {
                return Ok(outcome); // nothing worth keeping: do not insert
            }
            if self.len.load(Ordering::Relaxed) >= self.max_keys {
                if swept {
                    return Err(Error::BackendUnavailable {
                        message: format!(
                            "memory backend is full: {} keys hold live state (max_keys = {}); the new key was refused",
                            self.len(),
                            self.max_keys
                        ),
                    });
                }
                drop(shard);
                self.sweep_all(now);
                swept = true;
                continue;
            }
            let slot = Slot { hash, namespace, key: key.into(), expires_at, state };
            shard.table.insert_unique(hash, slot, |s| s.hash);
            self.len.fetch_add(1, Ordering::Relaxed);
            shard.inserts_since_sweep += 1;
            if shard.inserts_since_sweep > shard.table.len().max(64) {
                let removed = shard.sweep(now);
                self.len.fetch_sub(removed, Ordering::Relaxed);
            }
            return Ok(outcome);
        }
    }

    /// Forgets the state of (`namespace`, `key`); waiters on a concurrent limiter are woken.
    pub(crate) fn reset(&self, namespace: u32, key: &str) {
        let hash = self.hasher.hash_one((namespace, key));
        let mut shard = self.shard(hash).lock();
        if let Ok(entry) = shard.table.find_entry(hash, |s| s.namespace == namespace && *s.key == *key) {
            let (slot, _) = entry.remove();
            self.len.fetch_sub(1, Ordering::Relaxed);
            if let State::Concurrent(_, notify) = slot.state {
                notify.notify_waiters();
            }
        }
    }

    /// Drops expired state in every shard, one shard lock at a time.
    pub(crate) fn sweep_all(&self, now: u64) {
        for shard in self.shards.iter() {
            let removed = shard.0.lock().sweep(now);
            self.len.fetch_sub(removed, Ordering::Relaxed);
        }
    }
}

/// Runs one operation of one engine on one state; the one dispatch from operations to engines.
fn apply(algorithm: &Algorithm, state: &mut State, now: u64, op: Op) -> Result<(Outcome, bool)> {
    let plain = |e: Evaluation| Ok((Outcome { decision: e.decision, wake: None }, e.changed));
    match (algorithm, state, op) {
        (Algorithm::Gcra(g), State::Gcra(tat), Op::Check { cost, .. }) => plain(g.evaluate(tat, now, cost, true)),
        (Algorithm::Gcra(g), State::Gcra(tat), Op::Peek) => plain(g.evaluate(tat, now, 1, false)),
        (Algorithm::Gcra(g), State::Gcra(tat), Op::Adjust { estimate, actual }) => {
            let changed = g.adjust(tat, now, estimate, actual);
            let mut view = *tat;
            let (outcome, _) = plain(g.evaluate(&mut view, now, 1, false))?;
            Ok((outcome, changed))
        }
        (Algorithm::Sliding(s), State::Sliding(st), Op::Check { cost, .. }) => plain(s.evaluate(st, now, cost, true)),
        (Algorithm::Sliding(s), State::Sliding(st), Op::Peek) => plain(s.evaluate(st, now, 1, false)),
        (Algorithm::Log(l), State::Log(st), Op::Check { cost, .. }) => plain(l.evaluate(st, now, cost, true)),
        (Algorithm::Log(l), State::Log(st), Op::Peek) => plain(l.evaluate(st, now, 1, false)),
        (Algorithm::Concurrent(c), State::Concurrent(st, notify), op @ (Op::Check { .. } | Op::Peek)) => {
            let (lease_id, commit) = match op {
                Op::Check { lease_id, .. } => (lease_id, true),
                _ => (0, false),
            };
            let e = c.evaluate(st, now, lease_id, commit);
            let wake = (!e.decision.allowed).then(|| notify.clone());
            Ok((Outcome { decision: e.decision, wake }, e.changed))
        }
        (Algorithm::Concurrent(c), State::Concurrent(st, notify), Op::Release { lease_id }) => match c.release(st, lease_id) {
            Released::Freed => {
                notify.notify_one();
                let e = c.evaluate(st, now, 0, false);
                Ok((Outcome { decision: e.decision, wake: None }, true))
            }
            Released::Lost => Err(Error::LeaseLost {
                message: "the lease is no longer held: it outlived lock_timeout and was reclaimed, or the limiter was reset".into(),
            }),
        },
        (algorithm, _, op) => Err(Error::invalid("operation", format!("{op:?} does not apply to {algorithm:?}"))),
    }
}
