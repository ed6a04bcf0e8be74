//! The memory backend's holds (see [`crate::engine::hold`]: pauses and blocks): per role, per
//! namespace, per key, the instant (µs) each hold ends. Kept apart from the slots (so the slot
//! layout stays as it is), one table per role (so ending one role's hold never ends the
//! other's), decided as the Redis scripts' hold check decides ([`Hold::in_force`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::engine::hold::{self, Hold, HoldMode};
use crate::engine::{Algorithm, Op, Outcome};

/// Holds in effect in one memory backend.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    /// Indexed by [`Holds::table`].
    tables: [Table; 2],
}

/// The holds of one role.
#[derive(Debug, Default)]
struct Table {
    ends: Mutex<HashMap<u32, HashMap<Box<str>, u64>>>,
    /// How many holds `ends` holds: while none, calls skip its lock (the hot path stays
    /// lock-light; holds are rare).
    held: AtomicUsize,
}

impl Holds {
    fn table(&self, hold: Hold) -> &Table {
        &self.tables[hold as usize]
    }

    /// Whether any hold may be in effect (a cheap test before [`Holds::refusal`]).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.tables.iter().any(|t| t.held.load(Ordering::Acquire) != 0)
    }

    /// The refusal of `op` on (`namespace`, `key`) at `now` if a hold refuses it (see
    /// [`hold::applies_to`], [`Hold::in_force`]); holds that have ended are dropped.
    #[inline]
    pub(crate) fn refusal(
        &self,
        op: Op,
        namespace: u32,
        key: &str,
        now: u64,
        algorithm: &Algorithm,
    ) -> Option<Outcome> {
        if !self.any() || !hold::applies_to(op) {
            return None;
        }
        self.held(namespace, key, now, algorithm)
    }

    #[cold]
    #[inline(never)]
    fn held(&self, namespace: u32, key: &str, now: u64, algorithm: &Algorithm) -> Option<Outcome> {
        let [paused_until, blocked_until] = Hold::ALL.map(|hold| self.table(hold).until(namespace, key, now));
        let (hold, remaining) = Hold::in_force(paused_until, blocked_until, now)?;
        Some(hold::refusal(hold, algorithm.capacity(), remaining, now))
    }

    /// Holds (`namespace`, `key`) in role `hold` for `duration_us` from `now` (see
    /// [`HoldMode`]); returns the time (µs) left of the hold in effect. Ended holds of the
    /// namespace are dropped on the way, so the map holds no more than the holds in effect plus
    /// those ended since the last one was set.
    pub(crate) fn set(&self, hold: Hold, namespace: u32, key: &str, now: u64, duration_us: u64, mode: HoldMode) -> u64 {
        let table = self.table(hold);
        let wanted = now.saturating_add(duration_us.max(1));
        let mut ends = table.ends.lock();
        let keys = ends.entry(namespace).or_default();
        let before = keys.len();
        keys.retain(|_, until| *until > now);
        let until = keys.entry(key.into()).or_insert(0);
        *until = match mode {
            HoldMode::Set => wanted,
            HoldMode::Extend => (*until).max(wanted),
        };
        let in_effect = *until - now;
        let after = keys.len();
        if after >= before {
            table.held.fetch_add(after - before, Ordering::Release);
        } else {
            table.held.fetch_sub(before - after, Ordering::Release);
        }
        in_effect
    }

    /// Ends the hold of role `hold` on (`namespace`, `key`); returns whether one was in effect
    /// at `now`.
    pub(crate) fn remove(&self, hold: Hold, namespace: u32, key: &str, now: u64) -> bool {
        let table = self.table(hold);
        if table.held.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut ends = table.ends.lock();
        match ends.get_mut(&namespace).and_then(|keys| keys.remove(key)) {
            Some(until) => {
                table.held.fetch_sub(1, Ordering::Release);
                until > now
            }
            None => false,
        }
    }
}

impl Table {
    /// The instant (µs) the hold of (`namespace`, `key`) ends, 0 if none is in effect at `now`;
    /// a hold that has ended is dropped.
    fn until(&self, namespace: u32, key: &str, now: u64) -> u64 {
        if self.held.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut ends = self.ends.lock();
        let Some(keys) = ends.get_mut(&namespace) else { return 0 };
        match keys.get(key) {
            Some(&until) if until > now => until,
            Some(_) => {
                keys.remove(key);
                self.held.fetch_sub(1, Ordering::Release);
                0
            }
            None => 0,
        }
    }
}
