//! The memory backend's blocks (see [`crate::Limiter::block`]): per namespace, per key, the
//! instant (µs) each block ends. Kept apart from the slots (so the slot layout stays as it is)
//! and from pauses (so `resume` and `unblock` each end only their own).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::engine::block::BlockMode;

/// Blocks in effect in one memory backend.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    ends: Mutex<HashMap<u32, HashMap<Box<str>, u64>>>,
    /// How many blocks `ends` holds: while none, calls skip its lock (the hot path stays
    /// lock-light; blocks are rare).
    held: AtomicUsize,
}

impl Blocks {
    /// Whether any block may be in effect (a cheap test before [`Blocks::remaining`]).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.held.load(Ordering::Acquire) != 0
    }

    /// The time (µs) left of the block of (`namespace`, `key`) at `now`, if one is in effect;
    /// a block that has ended is dropped.
    #[cold]
    pub(crate) fn remaining(&self, namespace: u32, key: &str, now: u64) -> Option<u64> {
        let mut ends = self.ends.lock();
        let keys = ends.get_mut(&namespace)?;
        let until = *keys.get(key)?;
        if until > now {
            return Some(until - now);
        }
        keys.remove(key);
        self.held.fetch_sub(1, Ordering::Release);
        None
    }

    /// Blocks (`namespace`, `key`) for `duration_us` from `now` (see [`BlockMode`]); returns the
    /// time (µs) left of the block in effect. Ended blocks of the namespace are dropped on the
    /// way, so the map holds no more than the blocks in effect plus those ended since the last
    /// one was set.
    pub(crate) fn set(&self, namespace: u32, key: &str, now: u64, duration_us: u64, mode: BlockMode) -> u64 {
        let wanted = now.saturating_add(duration_us.max(1));
        let mut ends = self.ends.lock();
        let keys = ends.entry(namespace).or_default();
        let before = keys.len();
        keys.retain(|_, until| *until > now);
        let until = keys.entry(key.into()).or_insert(0);
        *until = match mode {
            BlockMode::Set => wanted,
            BlockMode::Extend => (*until).max(wanted),
        };
        let in_effect = *until - now;
        let after = keys.len();
        if after >= before {
            self.held.fetch_add(after - before, Ordering::Release);
        } else {
            self.held.fetch_sub(before - after, Ordering::Release);
        }
        in_effect
    }

    /// Ends the block of (`namespace`, `key`); returns whether one was in effect at `now`.
    pub(crate) fn remove(&self, namespace: u32, key: &str, now: u64) -> bool {
        if !self.any() {
            return false;
        }
        let mut ends = self.ends.lock();
        match ends.get_mut(&namespace).and_then(|keys| keys.remove(key)) {
            Some(until) => {
                self.held.fetch_sub(1, Ordering::Release);
                until > now
            }
            None => false,
        }
    }
}
