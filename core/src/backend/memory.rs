//! The embedded memory backend: per process, thread-safe, sharded, bounded.
//!
//! Every (kind, name) pair is interned to a small namespace id at limiter creation, so the hot
//! path hashes `(namespace, key)` once, locks one shard and touches one table slot (one cache
//! line: keys up to 22 bytes and the GCRA state live in the slot itself), allocating only when a
//! key is seen for the first time. Each slot records the instant after which its
//! state equals an empty one; such slots are swept incrementally as keys are inserted. A full
//! backend drops expired state before it refuses a new key (live state is never dropped to make
//! room), but sweeps only shards that can hold some: each shard keeps a lower bound of its
//! slots' expiry instants, so a backend full of live keys refuses a new key after one look per
//! shard instead of a pass over every slot.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::holds::Holds;
use crate::clock::{Clock, SystemClock};
use crate::engine::gcra::{Figures, Gcra};
use crate::engine::hold::{Hold, HoldMode};
use crate::engine::leased::Leased;
use crate::engine::{Algorithm, Engine, Kind, Op, Outcome};
use crate::error::{Error, Result};
use crate::padded::{folded_multiply, InlineBytes, KeyBytes};
use crate::views::ConcurrentUse;
use room::Room;

mod check_all;
mod room;
pub(crate) use check_all::Part as MemoryPart;

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
        MemoryConfig { max_keys: 1_000_000, shards: 64, clock: system_clock() }
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

/// The one system clock every default configuration shares, so that a backend can tell it
/// from a clock of the caller's by identity.
pub(crate) fn system_clock() -> Arc<dyn Clock> {
    static SYSTEM: std::sync::LazyLock<Arc<dyn Clock>> = std::sync::LazyLock::new(|| Arc::new(SystemClock));
    SYSTEM.clone()
}

/// Generates the per-key [`State`] of any engine, one variant per engine of the table in
/// `engine/kinds.rs` (inline or boxed as the table says), and the dispatch from an engine to its
/// state: [`State::fresh`], [`State::expires_at`] and [`apply`] (a direct `match`: it is on the
/// hot path).
macro_rules! memory_state {
    ($($variant:ident: $engine:ty, $storage:ident;)*) => {
        /// Per-key state of any engine. Kept to 24 bytes so that a whole [`Slot`] fits one cache
        /// line: the O(1) states (GCRA, calendar) live inline, the larger ones are boxed.
        enum State {
            $($variant(memory_state!(@stored $storage, <$engine as Engine>::State)),)*
        }

        impl State {
            fn fresh(algorithm: &Algorithm) -> State {
                match algorithm {
                    $(Algorithm::$variant(_) => State::$variant(Default::default()),)*
                }
            }

            /// A copy to restore if a `check_all` combination is refused.
            fn snapshot(&self) -> State {
                match self {
                    $(State::$variant(state) => State::$variant(state.clone()),)*
                }
            }

            #[inline]
            fn expires_at(&self, algorithm: &Algorithm) -> u64 {
                match (algorithm, self) {
                    $((Algorithm::$variant(e), State::$variant(state)) => e.expires_at(state),)*
                    _ => 0,
                }
            }
        }

        /// Runs one operation of one engine on the state it keeps in memory. Sets `changed` when
        /// the state was modified.
        #[inline]
        fn apply(algorithm: &Algorithm, state: &mut State, now: u64, op: Op, changed: &mut bool) -> Result<Outcome> {
            match (algorithm, state) {
                $((Algorithm::$variant(e), State::$variant(state)) => e.apply(state, now, op, changed),)*
                (algorithm, _) => Err(mismatch(algorithm, op)),
            }
        }
    };
    (@stored inline, $state:ty) => { $state };
    (@stored boxed, $state:ty) => { Box<$state> };
}
crate::engine::kinds::for_each_engine!(memory_state);

/// A stored key: up to [`InlineBytes::MAX`] bytes in the slot itself (user ids, IPv4
/// addresses, ...), longer ones (up to [`crate::params::MAX_KEY_BYTES`]) on the heap.
enum StoredKey {
    Inline(InlineBytes),
    Heap(Box<[u8]>),
}

impl StoredKey {
    #[inline]
    fn new(key: &[u8]) -> StoredKey {
        StoredKey::of(&KeyBytes::new(key))
    }

    /// [`StoredKey::new`] of a key made once per call.
    #[inline]
    fn of(key: &KeyBytes<'_>) -> StoredKey {
        match key {
            KeyBytes::Short(bytes) => StoredKey::Inline(*bytes),
            KeyBytes::Long(bytes) => StoredKey::Heap((*bytes).into()),
        }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        match self {
            StoredKey::Inline(bytes) => bytes.as_bytes(),
            StoredKey::Heap(bytes) => bytes,
        }
    }
}

impl Slot {
    #[inline]
    fn is(&self, namespace: u32, key: &[u8]) -> bool {
        self.namespace == namespace && self.key.as_bytes() == key
    }

    /// [`Slot::is`] for a key made once per call: a short key compares as three words (length
    /// included) instead of a call to `memcmp` per candidate slot.
    #[inline(always)]
    fn matches(&self, namespace: u32, key: &KeyBytes<'_>) -> bool {
        if self.namespace != namespace {
            return false;
        }
        match (&self.key, key) {
            (StoredKey::Inline(stored), KeyBytes::Short(key)) => stored == key,
            (StoredKey::Heap(stored), KeyBytes::Long(key)) => **stored == **key,
            _ => false,
        }
    }
}

/// One key's state: 64 bytes, aligned so that a lookup touches one cache line (plus the heap
/// for long keys and for the boxed states).
#[repr(align(64))]
struct Slot {
    key: StoredKey,
    expires_at: u64,
    state: State,
    namespace: u32,
}

const _: () = assert!(size_of::<Slot>() == 64);

#[repr(C)] // the table and the hint first, on the lock's cache line
struct Shard {
    table: HashTable<Slot>,
    /// The hash and bucket of the key this shard found last: a key checked again and again (a
    /// limiter without keys, a hot key) is found by one comparison of its hash and one of its
    /// key, not by a probe of the table. Only a hint: the bucket may since hold another key or
    /// none, so the key is compared before the bucket is used.
    hint: (u64, usize),
    inserts_since_sweep: usize,
    /// Slots left by the last sweep. The next sweep comes after at least as many inserts (and
    /// at least 64), so sweeping costs O(1) per insert.
    held_after_sweep: usize,
    /// No slot of this shard expires before this instant: exact after a sweep, lowered whenever
    /// a slot's expiry is set below it (raising an expiry leaves it a valid lower bound). While
    /// it is in the future, sweeping the shard cannot free anything.
    earliest_expiry: u64,
    /// Room for keys this shard took from the backend's `max_keys` and holds no key in yet
    /// (see `room.rs`).
    spare: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            table: HashTable::new(),
            hint: (0, 0),
            inserts_since_sweep: 0,
            held_after_sweep: 0,
            earliest_expiry: u64::MAX,
            spare: 0,
        }
    }
}

impl Shard {
    /// The slot of the key `hash` and `is` describe, through the hint when it names it; the
    /// hint then names the slot found.
    #[inline(always)]
    fn find_hinted(&mut self, hash: u64, is: impl Fn(&Slot) -> bool) -> Option<&mut Slot> {
        let (hinted_hash, hinted) = self.hint;
        // The hashes first: another key's check reads nothing more (the hint is on the line
        // the lock was just taken on).
        let index = if hinted_hash == hash && self.table.get_bucket(hinted).is_some_and(&is) {
            hinted
        } else {
            let index = self.table.find_bucket_index(hash, is)?;
            self.hint = (hash, index);
            index
        };
        self.table.get_bucket_mut(index)
    }

    /// Drops every slot whose state has expired; returns how many.
    fn sweep(&mut self, now: u64) -> usize {
        let before = self.table.len();
        let mut earliest = u64::MAX;
        self.table.retain(|slot| {
            let live = slot.expires_at > now;
            if live {
                earliest = earliest.min(slot.expires_at);
            }
            live
        });
        self.earliest_expiry = earliest;
        self.inserts_since_sweep = 0;
        self.held_after_sweep = self.table.len();
        before - self.table.len()
    }
}

/// Keeps each shard's lock (and each counter written by inserts) on its own cache line.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The memory backend. See the module documentation.
pub(crate) struct MemoryBackend {
    shards: Box<[Padded<Mutex<Shard>>]>,
    /// The number of shards less one (a power of two less one).
    shard_mask: usize,
    /// `max_keys`, shared by the shards (see `room.rs`).
    room: Room,
    /// Hashes long keys.
    hasher: foldhash::fast::RandomState,
    /// This backend's random seeds of the hash of short keys.
    seeds: [u64; 4],
    namespaces: Mutex<HashMap<(Kind, Box<str>), u32>>,
    pub(crate) clock: Arc<dyn Clock>,
    /// `clock` is the system clock: read it without a call through the trait object.
    system_clock: bool,
    /// Slots examined by sweeps so far: what the sweeps cost (read by tests).
    swept_slots: Padded<AtomicUsize>,
    /// Calls that found state last recorded by another configuration of the same name.
    pub(crate) config_mismatches: AtomicU64,
    /// Live overrides and the limiters built from this backend.
    pub(crate) live: crate::live::Live,
    /// Holds in effect (pauses and blocks, see `Limiter::pause` and `Limiter::block`). Kept
    /// apart from the slots so that the 64-byte slot layout stays as it is.
    holds: Holds,
    /// Settles applied (see `Limiter::settle`): a repeat of one is a peek.
    settled: Mutex<crate::engine::settle::SettledIds>,
    /// The key sealing this backend's settle tickets (see `settle_seal`): random, made at
    /// first use.
    seal_key: std::sync::OnceLock<Arc<crate::settle_seal::SealKey>>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The room taken, not `len()`: that locks every shard, and a caller may hold one.
        f.debug_struct("MemoryBackend")
            .field("reserved", &self.room.reserved())
            .field("max_keys", &self.room.max_keys())
            .finish()
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
        let system_clock = Arc::ptr_eq(&config.clock, &system_clock());
        let hasher = foldhash::fast::RandomState::default();
        let seeds = std::array::from_fn(|i| hasher.hash_one(i));
        if system_clock {
            super::wall_clock::prepare();
        }
        Ok(MemoryBackend {
            shards: (0..shards).map(|_| Padded(Mutex::new(Shard::default()))).collect(),
            shard_mask: shards - 1,
            room: Room::new(config.max_keys, shards),
            hasher,
            seeds,
            namespaces: Mutex::new(HashMap::new()),
            system_clock,
            clock: config.clock,
            swept_slots: Padded(AtomicUsize::new(0)),
            config_mismatches: AtomicU64::new(0),
            live: crate::live::Live::new(None, false),
            holds: Holds::default(),
            settled: Mutex::default(),
            seal_key: std::sync::OnceLock::new(),
        })
    }

    /// The key sealing this backend's settle tickets.
    pub(crate) fn seal_key(&self) -> Arc<crate::settle_seal::SealKey> {
        self.seal_key.get_or_init(|| Arc::new(crate::settle_seal::SealKey::random().0)).clone()
    }

    /// The backend clock's reading, in microseconds.
    #[inline(always)]
    pub(crate) fn now_micros(&self) -> u64 {
        if self.system_clock {
            super::wall_clock::now_micros()
        } else {
            self.clock.now_micros()
        }
    }

    /// Keys currently held (expired ones included until swept), counted shard by shard: it locks
    /// each in turn, so a caller holding a shard's lock must not ask.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.0.lock().table.len()).sum()
    }

    /// Slots examined by sweeps since the backend was made.
    #[cfg(test)]
    pub(crate) fn swept_slots(&self) -> usize {
        self.swept_slots.load(Ordering::Relaxed)
    }

    /// The namespace id of a (kind, name) pair, the same for every limiter built with it.
    pub(crate) fn namespace(&self, kind: Kind, name: &str) -> u32 {
        let mut namespaces = self.namespaces.lock();
        let next = namespaces.len() as u32;
        *namespaces.entry((kind, name.into())).or_insert(next)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        &self.shards[self.shard_index(hash)].0
    }

    /// The shard of `hash`, chosen by bits that hashbrown does not read within the shard: it
    /// places a key by the low bits and tells keys apart by the top seven. Shards chosen by the
    /// top bits left every key of a shard with the same top six, and so the same tag or one of
    /// two, which made every lookup compare the key of most slots of its group.
    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.shard_mask
    }

    /// The hash of (`namespace`, `key`): the same for a call's key and for a stored slot.
    #[inline]
    fn hash(&self, namespace: u32, key: &[u8]) -> u64 {
        self.hash_key(namespace, &KeyBytes::new(key))
    }

    /// [`MemoryBackend::hash`] of a key made once per call. A short key is hashed from the
    /// three words it is already held in, with two folded multiplies of the backend's random
    /// seeds (foldhash's own step for a string of up to 16 bytes), rather than read again byte
    /// by byte; a long one by foldhash.
    #[inline(always)]
    fn hash_key(&self, namespace: u32, key: &KeyBytes<'_>) -> u64 {
        match key {
            KeyBytes::Short(bytes) => self.hash_short(namespace, bytes),
            KeyBytes::Long(bytes) => self.hasher.hash_one((namespace, bytes)),
        }
    }

    #[inline(always)]
    fn hash_short(&self, namespace: u32, bytes: &InlineBytes) -> u64 {
        let [head, middle, tail] = bytes.words();
        let [s0, s1, s2, s3] = self.seeds;
        let words = folded_multiply(head ^ s0, middle ^ s1);
        folded_multiply(words ^ tail ^ s2, u64::from(namespace) ^ s3)
    }

    /// The hash of a stored slot's key, as [`MemoryBackend::hash`] of its bytes.
    #[inline]
    fn hash_stored(&self, slot: &Slot) -> u64 {
        let key = match &slot.key {
            StoredKey::Inline(bytes) => KeyBytes::Short(*bytes),
            StoredKey::Heap(bytes) => KeyBytes::Long(bytes),
        };
        self.hash_key(slot.namespace, &key)
    }

    /// Runs `op` on the state of (`namespace`, `key`).
    ///
    /// The hot path (the key is present) is small enough to inline into the caller, so the
    /// decision is built in place; a new key takes the out-of-line [`MemoryBackend::insert`].
    #[inline(always)]
    pub(crate) fn execute(&self, namespace: u32, key: &str, algorithm: &Algorithm, op: Op) -> Result<Outcome> {
        let now = self.now_micros();
        if let Some(refused) = self.holds.refusal(op, namespace, key, now, algorithm) {
            return Ok(refused);
        }
        let bytes = KeyBytes::new(key.as_bytes());
        let hash = self.hash_key(namespace, &bytes);
        let mut guard = self.shard(hash).lock();
        let shard = &mut *guard;
        if let Some(slot) = shard.table.find_mut(hash, |s| s.matches(namespace, &bytes)) {
            // The commonest call, a GCRA check (token bucket, leaky, points), is `apply`'s first
            // arm written out, so that its decision goes straight into the return slot. An
            // admitted check only moves the expiry later, so the shard's lower bound holds.
            if let (Algorithm::Gcra(g), State::Gcra(tat), Op::Check { cost, .. })
            | (Algorithm::Leased(Leased { gcra: g, .. }), State::Leased(tat), Op::Check { cost, .. }) =
                (algorithm, &mut slot.state, op)
            {
                let figures = g.figures(tat, now, cost, true);
                if figures.changed {
                    slot.expires_at = g.expires_at(tat);
                }
                drop(guard);
                let mut decision = figures.decision(g.capacity);
                decision.decided_at_micros = now;
                return Ok(Outcome::of(decision));
            }
            let outcome = update(slot, &mut shard.earliest_expiry, algorithm, now, op);
            drop(guard);
            return self.noted(outcome);
        }
        let shard = guard;
        self.insert(shard, now, hash, namespace, key, algorithm, op)
    }

    /// A GCRA check of `cost` on a key this backend holds in GCRA state or does not hold, with no
    /// pause or block in effect anywhere in the backend: its figures and the instant it was
    /// decided at. `None` (nothing done) for any other call, which [`MemoryBackend::execute`]
    /// then decides. The key is given as [`KeyBytes::new`] made it: the caller keeps it for the
    /// settle ticket.
    #[inline(always)]
    pub(crate) fn check_gcra(
        &self,
        namespace: u32,
        bytes: &KeyBytes<'_>,
        gcra: &Gcra,
        cost: u64,
    ) -> Option<(Figures, u64)> {
        if self.holds.any() {
            return None;
        }
        let now = self.now_micros();
        let hash = self.hash_key(namespace, bytes);
        let mut guard = self.shard(hash).lock();
        let shard = &mut *guard;
        let Some(slot) = shard.find_hinted(hash, |s| s.matches(namespace, bytes)) else {
            return self.insert_gcra(shard, now, hash, namespace, bytes, gcra, cost);
        };
        let State::Gcra(tat) = &mut slot.state else { return None };
        // An admitted check only moves the expiry later, so the shard's lower bound holds.
        let figures = gcra.figures(tat, now, cost, true);
        if figures.changed {
            slot.expires_at = gcra.expires_at(tat);
        }
        Some((figures, now))
    }

    /// [`MemoryBackend::check_gcra`] on a key its locked `shard` does not hold: the key's first
    /// check, or the first since its state expired and was swept (a key refilling faster than it
    /// is checked is dropped between checks, so with many keys this is the common case). `None`
    /// (nothing done) when the backend is full: [`MemoryBackend::insert`] reclaims or refuses.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn insert_gcra(
        &self,
        shard: &mut Shard,
        now: u64,
        hash: u64,
        namespace: u32,
        key: &KeyBytes<'_>,
        gcra: &Gcra,
        cost: u64,
    ) -> Option<(Figures, u64)> {
        let mut tat = crate::engine::gcra::GcraState::default();
        let figures = gcra.figures(&mut tat, now, cost, true);
        let expires_at = gcra.expires_at(&tat);
        if !figures.changed || expires_at <= now {
            return Some((figures, now)); // nothing worth keeping: do not insert
        }
        if !self.room.take(&mut shard.spare) {
            return None;
        }
        let slot = Slot { key: StoredKey::of(key), expires_at, state: State::Gcra(tat), namespace };
        self.add_slot(shard, hash, slot, now);
        Some((figures, now))
    }

    /// Inserts `slot` (a key `shard` does not hold, in room it has taken) and sweeps the shard when
    /// its turn has come.
    #[inline]
    fn add_slot(&self, shard: &mut Shard, hash: u64, slot: Slot, now: u64) {
        shard.earliest_expiry = shard.earliest_expiry.min(slot.expires_at);
        shard.table.insert_unique(hash, slot, |s| self.hash_stored(s));
        shard.inserts_since_sweep += 1;
        if shard.inserts_since_sweep > shard.held_after_sweep.max(64) {
            self.swept_slots.fetch_add(shard.table.len(), Ordering::Relaxed);
            let removed = shard.sweep(now);
            self.room.free(&mut shard.spare, removed);
        }
    }

    /// Runs a settle once per id: a repeat of an applied one is a peek. The id is remembered
    /// until the end of its settle window, past which the settle is refused, as on Redis.
    pub(crate) fn settle(&self, namespace: u32, key: &str, algorithm: &Algorithm, op: Op) -> Result<Outcome> {
        let Some((id, until)) = crate::engine::settle::id_of(op) else {
            return self.execute(namespace, key, algorithm, op);
        };
        // Held across the settle, so that two settles of one id never both apply.
        let mut settled = self.settled.lock();
        let now = self.now_micros();
        if settled.contains(namespace, id, now) {
            let outcome = self.execute(namespace, key, algorithm, Op::Peek)?;
            return Ok(Outcome { settle_repeated: true, ..outcome });
        }
        if settled.refuses(until, now) {
            return Err(crate::engine::settle::expired());
        }
        let outcome = self.execute(namespace, key, algorithm, op)?;
        settled.insert(namespace, id, until, now);
        Ok(outcome)
    }

    /// Counts a call that found another configuration's state.
    #[inline]
    fn noted(&self, outcome: Result<Outcome>) -> Result<Outcome> {
        if let Ok(Outcome { config_mismatch: true, .. }) = outcome {
            self.config_mismatches.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }

    /// The rest of [`MemoryBackend::execute`] for a key that was not found in its locked shard.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn insert<'a>(
        &'a self,
        mut shard: MutexGuard<'a, Shard>,
        now: u64,
        hash: u64,
        namespace: u32,
        key: &str,
        algorithm: &Algorithm,
        op: Op,
    ) -> Result<Outcome> {
        let mut swept = false;
        loop {
            if swept {
                // The shard was unlocked while sweeping: another caller may have added the key.
                let shard = &mut *shard;
                if let Some(slot) = shard.table.find_mut(hash, |s| s.is(namespace, key.as_bytes())) {
                    return self.noted(update(slot, &mut shard.earliest_expiry, algorithm, now, op));
                }
            }
            let mut state = State::fresh(algorithm);
            let mut changed = false;
            let outcome = apply(algorithm, &mut state, now, op, &mut changed)?;
            let expires_at = state.expires_at(algorithm);
            if !changed || expires_at <= now {
                return Ok(outcome); // nothing worth keeping: do not insert
            }
            if !self.room.take(&mut shard.spare) {
                if swept {
                    return Err(self.full());
                }
                drop(shard);
                self.reclaim(now);
                swept = true;
                shard = self.shard(hash).lock();
                continue;
            }
            let slot = Slot { key: StoredKey::new(key.as_bytes()), expires_at, state, namespace };
            self.add_slot(&mut shard, hash, slot, now);
            return Ok(outcome);
        }
    }

    /// Holds (`namespace`, `key`) in role `hold` for `duration` (see [`HoldMode`]); returns the
    /// hold in effect.
    pub(crate) fn hold(&self, namespace: u32, key: &str, hold: Hold, duration: Duration, mode: HoldMode) -> Duration {
        let now = self.now_micros();
        Duration::from_micros(self.holds.set(hold, namespace, key, now, crate::params::micros(duration), mode))
    }

    /// Ends the hold of role `hold` on (`namespace`, `key`), if one is in effect (see
    /// `limiter/hold.rs`); returns whether one was.
    pub(crate) fn release(&self, namespace: u32, key: &str, hold: Hold) -> bool {
        self.holds.remove(hold, namespace, key, self.now_micros())
    }

    /// Forgets the state of (`namespace`, `key`), its pause and block included; waiters on a
    /// concurrent limiter are woken.
    pub(crate) fn reset(&self, namespace: u32, key: &str) {
        for hold in Hold::ALL {
            self.holds.remove(hold, namespace, key, 0);
        }
        let hash = self.hash(namespace, key.as_bytes());
        let mut shard = self.shard(hash).lock();
        if let Ok(entry) = shard.table.find_entry(hash, |s| s.is(namespace, key.as_bytes())) {
            let (slot, _) = entry.remove();
            self.room.free(&mut shard.spare, 1);
            if let State::Concurrent(concurrent) = slot.state {
                // Every waiter wakes and re-checks against the fresh state.
                concurrent.1.close();
            }
        }
    }

    /// What an operator sees of concurrent key (`namespace`, `key`): its holders and waiters.
    pub(crate) fn concurrent_use(&self, namespace: u32, key: &str) -> ConcurrentUse {
        let now = self.now_micros();
        let hash = self.hash(namespace, key.as_bytes());
        let shard = self.shard(hash).lock();
        match shard.table.find(hash, |s| s.is(namespace, key.as_bytes())).map(|slot| &slot.state) {
            Some(State::Concurrent(state)) => state.0.usage(now),
            _ => ConcurrentUse::default(),
        }
    }

    /// Up to `max` keys of `namespace` whose state has not expired, one shard lock at a time.
    pub(crate) fn keys_of(&self, namespace: u32, max: usize) -> Vec<String> {
        let now = self.now_micros();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            let live = shard.table.iter().filter(|s| s.namespace == namespace && s.expires_at > now);
            out.extend(live.take(max - out.len()).map(|s| String::from_utf8_lossy(s.key.as_bytes()).into_owned()));
            if out.len() >= max {
                break;
            }
        }
        out.sort();
        out
    }

    /// Makes room in a full backend: sweeps the shards that can hold expired state (their lower
    /// bound has passed), one shard lock at a time, and gives every shard's spare room back. A
    /// sweep makes its shard's bound exact, so a shard whose slots are all live is not swept
    /// again before one of them can expire: a backend full of live keys costs one look per shard
    /// per refused key.
    fn reclaim(&self, now: u64) {
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            let shard = &mut *shard;
            if shard.earliest_expiry <= now {
                self.swept_slots.fetch_add(shard.table.len(), Ordering::Relaxed);
                let removed = shard.sweep(now);
                self.room.free(&mut shard.spare, removed);
            }
            self.room.give_back(&mut shard.spare);
        }
    }

    /// The refusal of a new key by a full backend.
    fn full(&self) -> Error {
        Error::BackendUnavailable {
            message: format!("memory backend is full (max_keys = {}): the new key was refused", self.room.max_keys()),
        }
    }
}

/// Runs `op` on a stored slot and keeps its expiry, and its shard's lower bound of expiries
/// (`earliest_expiry`), up to date: a refund or a release can move an expiry earlier.
#[inline(never)]
fn update(slot: &mut Slot, earliest_expiry: &mut u64, algorithm: &Algorithm, now: u64, op: Op) -> Result<Outcome> {
    let mut changed = false;
    let outcome = apply(algorithm, &mut slot.state, now, op, &mut changed);
    if changed {
        slot.expires_at = slot.state.expires_at(algorithm);
        *earliest_expiry = (*earliest_expiry).min(slot.expires_at);
    }
    outcome
}

#[cold]
#[inline(never)]
fn mismatch(algorithm: &Algorithm, op: Op) -> Error {
    Error::invalid("operation", format!("{op:?} does not apply to {algorithm:?}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::backend::BackendInner;
    use crate::{Backend, ErrorKind, ManualClock, MemoryConfig};

    fn swept_slots(backend: &Backend) -> usize {
        match &*backend.inner {
            BackendInner::Memory(m) => m.swept_slots(),
            BackendInner::Redis(_) => panic!("a memory backend"),
        }
    }

    /// Every engine's state fits in 24 bytes, so that a slot (key, expiry, state, namespace)
    /// stays one cache line: a new engine whose state is larger is declared `boxed`.
    #[test]
    fn the_state_of_every_engine_fits_in_24_bytes() {
        assert_eq!(size_of::<super::State>(), 24);
        assert_eq!(size_of::<super::Slot>(), 64);
    }

    /// The keys one shard holds spread over hashbrown's tags (the top seven bits of the hash,
    /// which tell keys of one probe group apart), and over its shards: choosing the shard by the
    /// top bits left every key of a shard with one or two tags, so each lookup compared the key
    /// of most slots in its group.
    #[test]
    fn the_keys_of_one_shard_spread_over_every_tag() {
        let memory = super::MemoryBackend::new(MemoryConfig::default().shards(64)).unwrap();
        let mut tags = std::collections::HashSet::new();
        let mut shards = std::collections::HashSet::new();
        for i in 0..20_000 {
            let key = format!("user-{i:08}");
            let hash = memory.hash(0, key.as_bytes());
            shards.insert(memory.shard_index(hash));
            if memory.shard_index(hash) == 0 {
                tags.insert(hash >> 57);
            }
        }
        assert_eq!(shards.len(), 64, "every shard is used");
        // About 312 keys over 128 tags use about 116 of them; top bits gave 2.
        assert!(tags.len() >= 64, "the keys of shard 0 use {} of the 128 tags", tags.len());
    }

    /// The shard's hint names the bucket of the key found last; once that key is gone and
    /// another holds its bucket, the first key's next check is its own (a new key), not the
    /// other's.
    #[test]
    fn a_hint_to_a_bucket_another_key_took_is_not_followed() {
        let backend = Backend::memory_with(MemoryConfig::default().shards(1)).unwrap();
        let BackendInner::Memory(memory) = &*backend.inner else { panic!("a memory backend") };
        let bucket_of = |key: &str| {
            let hash = memory.hash(0, key.as_bytes());
            memory.shards[0].lock().table.find_bucket_index(hash, |s| s.is(0, key.as_bytes()))
        };
        let limiter = backend.token_bucket("hint", 1.0 / 3600.0, 10).unwrap();
        assert_eq!(limiter.check_blocking(Some("a"), 2).unwrap().remaining, 8);
        assert_eq!(limiter.check_blocking(Some("a"), 1).unwrap().remaining, 7, "found: the hint names a");
        let a_bucket = bucket_of("a").expect("a is held");
        limiter.reset_blocking(Some("a")).unwrap();
        // Another key in the bucket `a` had (and the hint still names).
        let other = (0..1_000)
            .map(|i| format!("b{i}"))
            .find(|key| {
                assert_eq!(limiter.check_blocking(Some(key), 5).unwrap().remaining, 5);
                bucket_of(key) == Some(a_bucket) || {
                    limiter.reset_blocking(Some(key)).unwrap();
                    false
                }
            })
            .expect("some key takes the bucket a left");
        assert_eq!(memory.shards[0].lock().hint.1, a_bucket, "the hint still names a's bucket");
        assert_eq!(limiter.check_blocking(Some("a"), 1).unwrap().remaining, 9, "a is new again");
        assert_eq!(limiter.check_blocking(Some(&other), 1).unwrap().remaining, 4, "{other} kept its own state");
        for _ in 0..3 {
            assert!(limiter.check_blocking(Some("a"), 1).unwrap().allowed);
        }
        assert_eq!(limiter.peek_blocking(Some("a")).unwrap().remaining, 6);
        assert_eq!(limiter.peek_blocking(Some(&other)).unwrap().remaining, 4);
    }

    /// A key is found again whatever its length, by its stored bytes as by the call's: the hash
    /// of a short key (its three words) and of a long one (foldhash) is the same for a call's
    /// key and for the stored slot, also when the table grows and rehashes them.
    #[test]
    fn a_stored_key_hashes_as_the_key_of_a_call() {
        let memory = super::MemoryBackend::new(MemoryConfig::default()).unwrap();
        for len in 0..=40 {
            let key = "k".repeat(len);
            let slot = super::Slot {
                key: super::StoredKey::new(key.as_bytes()),
                expires_at: 0,
                state: super::State::Gcra(Default::default()),
                namespace: 7,
            };
            assert_eq!(memory.hash_stored(&slot), memory.hash(7, key.as_bytes()), "length {len}");
            assert_ne!(memory.hash(7, key.as_bytes()), memory.hash(8, key.as_bytes()), "length {len}");
        }
    }

    /// A backend full of live keys refuses each new key without re-examining every slot: the
    /// work per refused key is bounded, not proportional to `max_keys`.
    #[test]
    fn a_full_backend_refuses_new_keys_without_sweeping_everything() {
        let clock = ManualClock::new(1_800_000_000_000_000);
        let config = MemoryConfig::default().max_keys(4_000).shards(8).clock(Arc::new(clock.clone()));
        let backend = Backend::memory_with(config).unwrap();
        let limiter = backend.token_bucket("live", 1.0 / 3600.0, 10).unwrap();
        for i in 0..4_000 {
            limiter.check_blocking(Some(&format!("live-{i}")), 1).unwrap();
        }
        assert_eq!(backend.memory_len(), Some(4_000));
        let before = swept_slots(&backend);
        for i in 0..1_000 {
            clock.advance(Duration::from_millis(1));
            let err = limiter.check_blocking(Some(&format!("new-{i}")), 1).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::BackendUnavailable, "{err}");
        }
        let visited = swept_slots(&backend) - before;
        // At most one pass over the table in all (a bound can be stale once), not one per key.
        assert!(visited <= 4_000, "1,000 refused keys examined {visited} slots");
        // Live state was kept.
        assert_eq!(limiter.peek_blocking(Some("live-0")).unwrap().remaining, 9);
    }

    /// Expired state is still dropped first when the backend is full: as many new keys are
    /// admitted as keys expired, wherever they are, then new keys are refused again; a key whose
    /// expiry moved later (a stale lower bound) is not dropped.
    #[test]
    fn a_full_backend_still_reclaims_every_expired_key() {
        let clock = ManualClock::new(1_800_000_000_000_000);
        let config = MemoryConfig::default().max_keys(1_000).shards(8).clock(Arc::new(clock.clone()));
        let backend = Backend::memory_with(config).unwrap();
        let long = backend.token_bucket("long", 1.0 / 3600.0, 10).unwrap();
        let short = backend.token_bucket("short", 1.0, 10).unwrap(); // 1 s of state per call
        for i in 0..900 {
            long.check_blocking(Some(&format!("long-{i}")), 1).unwrap();
        }
        for i in 0..100 {
            short.check_blocking(Some(&format!("short-{i}")), 1).unwrap();
        }
        // Ten short keys get 8.5 s more state after the others were inserted.
        clock.advance(Duration::from_millis(500));
        for i in 0..10 {
            short.check_blocking(Some(&format!("short-{i}")), 10 - 1).unwrap();
        }
        assert!(long.check_blocking(Some("refused"), 1).unwrap_err().kind() == ErrorKind::BackendUnavailable);
        clock.advance(Duration::from_secs(2)); // 90 short keys expired, 10 still live
        for i in 0..90 {
            long.check_blocking(Some(&format!("new-{i}")), 1).unwrap_or_else(|e| panic!("new-{i}: {e}"));
        }
        let err = long.check_blocking(Some("one-too-many"), 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BackendUnavailable, "{err}");
        for i in 0..10 {
            assert_eq!(short.peek_blocking(Some(&format!("short-{i}"))).unwrap().remaining, 2, "short-{i} kept");
        }
        assert_eq!(long.peek_blocking(Some("long-0")).unwrap().remaining, 9);
    }

    /// Keys around the inline/heap boundary, with NUL bytes, prefixes of each other and
    /// multi-byte characters, stay distinct per limiter and are found again after the tables
    /// have grown (rehashing recomputes every hash from the stored key).
    #[test]
    fn keys_of_every_length_stay_distinct_across_growth() {
        let clock = ManualClock::new(1_800_000_000_000_000);
        let backend = Backend::memory_with(MemoryConfig::default().shards(2).clock(Arc::new(clock))).unwrap();
        let a = backend.token_bucket("a", 1.0, 3).unwrap();
        let b = backend.token_bucket("b", 1.0, 3).unwrap();
        let mut keys: Vec<String> = (0..=48).map(|n| "k".repeat(n)).collect();
        keys.extend((0..=48).map(|n| format!("{}\0", "k".repeat(n))));
        keys.extend((1..=24).map(|n| "é".repeat(n)));
        keys.push("\0".repeat(22));
        keys.push("\0".repeat(23));
        for key in &keys {
            assert_eq!(a.check_blocking(Some(key), 1).unwrap().remaining, 2, "{key:?}");
        }
        for i in 0..20_000 {
            b.check_blocking(Some(&format!("filler-{i}")), 1).unwrap();
        }
        for key in &keys {
            assert_eq!(a.check_blocking(Some(key), 1).unwrap().remaining, 1, "{key:?}");
            assert_eq!(b.check_blocking(Some(key), 1).unwrap().remaining, 2, "{key:?}");
        }
        assert_eq!(backend.memory_len(), Some(keys.len() * 2 + 20_000));
        for key in &keys {
            a.reset_blocking(Some(key)).unwrap();
            assert_eq!(a.check_blocking(Some(key), 1).unwrap().remaining, 2, "{key:?}");
        }
    }
}
