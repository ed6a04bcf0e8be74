//! The concurrent limiter: at most `limit` leases held at once. A lease older than
//! `lock_timeout` may be reclaimed when a caller needs its slot. Every grant carries a fencing
//! token `max(previous + 1, now)`: strictly increasing per key, even across idle expiry of the
//! state (as long as the clock does not go backwards).

use super::{decision, Evaluation};
use crate::decision::Lease;

/// Parameters in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Concurrent {
    pub limit: u64,
    pub lock_us: u64,
}

/// One held slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holder {
    id: u128,
    expires_at: u64,
}

/// Per-key state.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConcurrentState {
    holders: Vec<Holder>,
    last_token: u64,
    /// Holders whose lease had expired and were reclaimed by a later caller.
    pub reclaimed: u64,
}

/// What `release` (or `extend`) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lease was held (and is now free, or renewed); `overdue` when its lock_timeout (as
    /// last extended) had already passed: the holder ran too long, though nobody reclaimed it.
    Freed { overdue: bool },
    /// The lease is unknown: reclaimed by another caller, or its state expired.
    Lost,
}

impl Concurrent {
    /// Tries to grant lease `id` (or, when `commit` is false, tells whether one would be granted).
    pub(crate) fn evaluate(&self, state: &mut ConcurrentState, now: u64, id: u128, commit: bool) -> Evaluation {
        let live = state.holders.iter().filter(|h| h.expires_at > now).count() as u64;
        let mut changed = false;
        if commit && state.holders.len() as u64 >= self.limit && live < self.limit {
            // Full only because of overdue holders: reclaim them.
            let before = state.holders.len();
            state.holders.retain(|h| h.expires_at > now);
            state.reclaimed += (before - state.holders.len()) as u64;
            changed = true;
        }
        let allowed = live < self.limit;
        if !allowed || !commit {
            let retry = if allowed { 0 } else { self.retry_us(state, now, live) };
            let d = decision(allowed, self.limit, self.limit - live.min(self.limit), retry, self.reset_us(state, now));
            return Evaluation { decision: d, changed };
        }
        let token = (state.last_token + 1).max(now);
        state.last_token = token;
        state.holders.push(Holder { id, expires_at: now + self.lock_us });
        let mut d = decision(true, self.limit, self.limit - live - 1, 0, self.reset_us(state, now));
        d.lease = Some(Lease { id, fencing_token: token, granted_at_micros: now });
        Evaluation { decision: d, changed: true }
    }

    /// Renews lease `id` for another `lock_timeout` from `now`, if it is still held.
    pub(crate) fn extend(&self, state: &mut ConcurrentState, now: u64, id: u128) -> Released {
        match state.holders.iter_mut().find(|h| h.id == id) {
            Some(holder) => {
                let overdue = holder.expires_at <= now;
                holder.expires_at = now + self.lock_us;
                Released::Freed { overdue }
            }
            None => Released::Lost,
        }
    }

    /// Frees lease `id` if it is still held.
    pub(crate) fn release(&self, state: &mut ConcurrentState, now: u64, id: u128) -> Released {
        match state.holders.iter().position(|h| h.id == id) {
            Some(index) => {
                let holder = state.holders.swap_remove(index);
                Released::Freed { overdue: holder.expires_at <= now }
            }
            None => Released::Lost,
        }
    }

    /// For a refused call: the time until the live holders drop below the limit, when the
    /// `live - limit + 1`-th earliest live lease expires. Overdue holders still stored (full
    /// with live ones, nothing was reclaimed) do not count: their expiry has passed.
    fn retry_us(&self, state: &ConcurrentState, now: u64, live: u64) -> u64 {
        let mut expiries: Vec<u64> = state.holders.iter().map(|h| h.expires_at).filter(|&e| e > now).collect();
        if expiries.is_empty() {
            return 0; // not refused: a refusal means `live >= limit >= 1`
        }
        let index = (live.saturating_sub(self.limit) as usize).min(expiries.len() - 1);
        let (_, expiry, _) = expiries.select_nth_unstable(index);
        *expiry - now
    }

    fn reset_us(&self, state: &ConcurrentState, now: u64) -> u64 {
        self.expires_at(state).saturating_sub(now)
    }

    /// The instant after which every holder is overdue (the state may then be forgotten).
    pub(crate) fn expires_at(&self, state: &ConcurrentState) -> u64 {
        state.holders.iter().map(|h| h.expires_at).max().unwrap_or(0)
    }
}
