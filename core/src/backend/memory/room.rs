//! Room for keys: the memory backend's `max_keys`, shared by its shards.
//!
//! With many keys most checks insert (a key that refilled since its last check was swept), and
//! a count written by every insert is one cache line that two cores pass back and forth on every
//! check. So each shard takes room from the backend's count a chunk at a time, under its own
//! lock, and inserts into it without touching the shared count; the room its sweeps free stays
//! with it, up to a chunk. The shared count is the keys held plus the shards' spare room, so it
//! is never above `max_keys`: every key held is within room some shard took.
//!
//! Near full, a shard takes room one key at a time, and a single key's insert that finds no room
//! gives every shard's spare room back before it refuses (see `MemoryBackend::reclaim`), so the
//! bound is exact. A `check_all` insert cannot (it holds several shards' locks): it may be
//! refused while other shards hold spare room, at most a chunk less one each. A backend too
//! small for chunks (`max_keys` below 32 keys per shard) takes and gives back one key at a time.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The backend's side of the room: how much the shards have taken (see the module documentation).
pub(super) struct Room {
    /// Keys held plus the shards' spare room. On a cache line of its own, so that its writes do
    /// not evict the fields every check reads (the shards, the hasher) from other cores.
    reserved: super::Padded<AtomicUsize>,
    max_keys: usize,
    /// Keys of room a shard takes at once while the backend is far from full; a shard keeps at
    /// most `chunk - 1` spare.
    chunk: usize,
    /// Below this much room left, shards take one key at a time: the spare room the shards may
    /// hold (`chunk - 1` each) then stays small beside what is left.
    near_full: usize,
}

impl Room {
    /// Room for `max_keys` keys shared by `shards` shards.
    pub(super) fn new(max_keys: usize, shards: usize) -> Room {
        let chunk = (max_keys / shards.saturating_mul(16)).clamp(1, 64);
        Room { reserved: super::Padded(AtomicUsize::new(0)), max_keys, chunk, near_full: chunk.saturating_mul(shards) }
    }

    /// The backend's bound.
    pub(super) fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Takes room for one key from a shard's `spare`, or from the backend's count when it has
    /// none; false when the backend is full.
    #[inline(always)]
    pub(super) fn take(&self, spare: &mut usize) -> bool {
        if *spare > 0 {
            *spare -= 1;
            return true;
        }
        self.take_shared(spare)
    }

    /// [`Room::take`] from the backend's count: a chunk (one key for this insert, the rest
    /// into `spare`), or one key near full.
    fn take_shared(&self, spare: &mut usize) -> bool {
        let mut taken = 0;
        let reserved = self.reserved.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |reserved| {
            let left = self.max_keys.saturating_sub(reserved);
            taken = if left > self.near_full { self.chunk } else { left.min(1) };
            (taken > 0).then_some(reserved + taken)
        });
        if reserved.is_err() {
            return false;
        }
        *spare += taken - 1;
        true
    }

    /// Room for `freed` keys a shard no longer holds: kept in its `spare` up to a chunk less
    /// one, the rest given back to the backend.
    #[inline]
    pub(super) fn free(&self, spare: &mut usize, freed: usize) {
        *spare += freed;
        if *spare >= self.chunk {
            self.reserved.fetch_sub(*spare - (self.chunk - 1), Ordering::Relaxed);
            *spare = self.chunk - 1;
        }
    }

    /// Gives a shard's `spare` room back to the backend, all of it: a full backend makes every
    /// key of room it has available before it refuses one.
    pub(super) fn give_back(&self, spare: &mut usize) {
        if *spare > 0 {
            self.reserved.fetch_sub(*spare, Ordering::Relaxed);
            *spare = 0;
        }
    }

    /// Keys held plus the shards' spare room (never above `max_keys`).
    pub(super) fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::Room;

    /// Takes room for keys across `spares`, round robin, until a whole round is refused; how
    /// many keys were granted.
    fn fill(room: &Room, spares: &mut [usize]) -> usize {
        let mut granted = 0;
        loop {
            let round = spares.iter_mut().map(|spare| room.take(spare)).filter(|&took| took).count();
            if round == 0 {
                return granted;
            }
            granted += round;
        }
    }

    #[test]
    fn the_room_taken_never_passes_max_keys_and_a_full_backend_gives_all_of_it() {
        for (max_keys, shards) in [(10, 64), (1_000, 8), (100_000, 64), (1_000_000, 64)] {
            let room = Room::new(max_keys, shards);
            let mut spares = vec![0; shards];
            assert_eq!(fill(&room, &mut spares), max_keys, "max_keys {max_keys}");
            assert_eq!(room.reserved(), max_keys);
            assert_eq!(spares.iter().sum::<usize>(), 0, "max_keys {max_keys}: room left spare");
            // A shard that frees keys keeps at most a chunk less one, and gives the rest back.
            let freed = max_keys.min(100);
            room.free(&mut spares[1], freed);
            assert!(spares[1] < 64);
            assert_eq!(room.reserved(), max_keys - (freed - spares[1]));
            room.give_back(&mut spares[1]);
            assert_eq!(room.reserved(), max_keys - freed);
            assert_eq!(fill(&room, &mut spares), freed, "max_keys {max_keys}");
        }
    }

    #[test]
    fn a_small_backend_takes_and_gives_back_one_key_at_a_time() {
        let room = Room::new(10, 64);
        let mut spare = 0;
        assert!(room.take(&mut spare));
        assert_eq!((room.reserved(), spare), (1, 0));
        room.free(&mut spare, 1);
        assert_eq!((room.reserved(), spare), (0, 0));
    }

    #[test]
    fn far_from_full_a_shard_touches_the_shared_count_once_per_chunk() {
        let room = Room::new(1_000_000, 64);
        let mut spare = 0;
        assert!(room.take(&mut spare));
        assert_eq!((room.reserved(), spare), (64, 63));
        for _ in 0..63 {
            assert!(room.take(&mut spare));
        }
        assert_eq!((room.reserved(), spare), (64, 0));
    }
}
