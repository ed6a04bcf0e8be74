//! `check_all` on the memory backend: several parts decided at one instant, all admitted or
//! none consumed.
//!
//! The shards the parts hash to are locked together, in ascending shard order (so two
//! combinations never wait on each other in a cycle), and held until every part is decided.
//! Each part's state is snapshotted before it is applied (engine states are small); when any
//! part refuses, every part is undone, newest first, so the combination consumed nothing.

use parking_lot::MutexGuard;

use super::{apply, update, Algorithm, MemoryBackend, Op, Ordering, Outcome, Result, Shard, Slot, State, StoredKey};

/// One part of a combination: an operation on one key of one namespace.
pub(crate) struct Part<'a> {
    pub namespace: u32,
    pub key: &'a str,
    pub algorithm: &'a Algorithm,
    pub op: Op,
}

/// How to undo what a part did.
enum Undo {
    /// Nothing was written (a paused or blocked part, or one whose state was worth nothing).
    Nothing,
    /// The part's slot held `state` until `expires_at` before the part ran.
    Restore { state: State, expires_at: u64 },
    /// The part inserted its slot.
    Remove,
}

impl MemoryBackend {
    /// Runs every part at one instant; returns whether all were admitted and each part's
    /// outcome. When one refused (or failed), nothing any part did is kept.
    pub(crate) fn execute_all(&self, parts: &[Part<'_>]) -> Result<(bool, Vec<Outcome>)> {
        let now = self.now_micros();
        // Blocks and pauses first, before any shard lock (each is set under its own lock alone),
        // in the order `execute` checks them.
        let paused: Vec<Option<Outcome>> =
            parts.iter().map(|p| self.holds.refusal(p.op, p.namespace, p.key, now, p.algorithm)).collect();
        let hashes: Vec<u64> = parts.iter().map(|p| self.hash(p.namespace, p.key.as_bytes())).collect();
        let mut order: Vec<usize> = hashes.iter().map(|h| self.shard_index(*h)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> = order.iter().map(|i| self.shards[*i].0.lock()).collect();
        let slot_of = |hash: u64| order.binary_search(&self.shard_index(hash)).expect("every part's shard is locked");

        let mut outcomes = Vec::with_capacity(parts.len());
        let mut undo = Vec::with_capacity(parts.len());
        let mut failed = None;
        for ((part, hash), paused) in parts.iter().zip(&hashes).zip(paused) {
            if let Some(refused) = paused {
                outcomes.push(refused);
                undo.push(Undo::Nothing);
                continue;
            }
            let shard = &mut *guards[slot_of(*hash)];
            let key = part.key.as_bytes();
            let ran = match shard.table.find_mut(*hash, |s| s.is(part.namespace, key)) {
                Some(slot) => {
                    let saved = Undo::Restore { state: slot.state.snapshot(), expires_at: slot.expires_at };
                    update(slot, &mut shard.earliest_expiry, part.algorithm, now, part.op).map(|o| (o, saved))
                }
                None => self.insert_held(shard, now, *hash, part),
            };
            match ran {
                Ok((outcome, saved)) => {
                    outcomes.push(outcome);
                    undo.push(saved);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let admitted = failed.is_none() && outcomes.iter().all(|o| o.decision.allowed);
        if !admitted {
            for ((part, hash), undo) in parts.iter().zip(&hashes).zip(undo).rev() {
                let shard = &mut *guards[slot_of(*hash)];
                let key = part.key.as_bytes();
                match undo {
                    Undo::Nothing => {}
                    Undo::Restore { state, expires_at } => {
                        if let Some(slot) = shard.table.find_mut(*hash, |s| s.is(part.namespace, key)) {
                            slot.state = state;
                            slot.expires_at = expires_at;
                            shard.earliest_expiry = shard.earliest_expiry.min(expires_at);
                        }
                    }
                    Undo::Remove => {
                        if let Ok(entry) = shard.table.find_entry(*hash, |s| s.is(part.namespace, key)) {
                            entry.remove();
                            self.room.free(&mut shard.spare, 1);
                        }
                    }
                }
            }
        }
        drop(guards);
        if let Some(e) = failed {
            return Err(e);
        }
        for outcome in &outcomes {
            if outcome.config_mismatch {
                self.config_mismatches.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok((admitted, outcomes))
    }

    /// A part on a key its locked `shard` does not hold: applied to a fresh state, inserted if
    /// worth keeping. A full backend refuses it (no sweep: other shards are locked).
    fn insert_held(&self, shard: &mut Shard, now: u64, hash: u64, part: &Part<'_>) -> Result<(Outcome, Undo)> {
        let mut state = State::fresh(part.algorithm);
        let mut changed = false;
        let outcome = apply(part.algorithm, &mut state, now, part.op, &mut changed)?;
        let expires_at = state.expires_at(part.algorithm);
        if !changed || expires_at <= now {
            return Ok((outcome, Undo::Nothing));
        }
        if !self.room.take(&mut shard.spare) {
            return Err(self.full());
        }
        let slot = Slot { key: StoredKey::new(part.key.as_bytes()), expires_at, state, namespace: part.namespace };
        shard.earliest_expiry = shard.earliest_expiry.min(expires_at);
        shard.table.insert_unique(hash, slot, |s| self.hash_stored(s));
        Ok((outcome, Undo::Remove))
    }
}
