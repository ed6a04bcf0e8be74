//! Settles (see [`crate::Limiter::settle`]): what every engine shares to apply a settle once
//! per id. Each engine's own rule for a settle (what a charge or a refund does to its state) is
//! in the engine's file, beside its `.lua`; the once-per-id record is written once, here for the
//! memory backend ([`SettledIds`]) and in the scripts' wrapper for Redis (`settle_once.lua`,
//! see [`super::lua`]).

use std::collections::HashMap;

use super::contract::{malformed, Op, Outcome};
use super::{hold, Algorithm};
use crate::defaults::SETTLE_WINDOW;
use crate::error::{Error, Result};

/// The role of an identity's record of applied settles (`…:settled:<key>`): same identity, same
/// hash tag as the engine's keys.
pub(crate) const ROLE: &str = "settled";

/// The most settle ids one memory backend remembers: beyond it, the records whose window has
/// passed go first, then the oldest ones, and settles of decisions as old as those are refused
/// from then on (see [`SettledIds`]).
pub(crate) const MAX_SETTLED_IDS: usize = 100_000;

/// The settle of `op`, if it is one: its id, and the instant (µs) from which it is refused,
/// [`SETTLE_WINDOW`] after its call was charged. Its id is remembered until then.
#[inline]
pub(crate) fn id_of(op: Op) -> Option<(u64, u64)> {
    match op {
        Op::Settle { id, at, .. } => Some((id, at.saturating_add(SETTLE_WINDOW.as_micros() as u64))),
        _ => None,
    }
}

/// The error of a settle whose decision is older than the settle window.
pub(crate) fn expired() -> Error {
    Error::invalid(
        "decision",
        format!(
            "was checked more than {} s ago: a decision is settled within the settle window (SETTLE_WINDOW) of its \
             check; past it, the record of applied settles no longer holds its id, so a repeat could not be told \
             from a first settle",
            SETTLE_WINDOW.as_secs()
        ),
    )
}

/// The outcome of a settle from its script's reply `{applied, engine reply…}`: the engine's
/// reading of a settle when it applied, of a peek when its id had been applied before.
pub(crate) fn decode(algorithm: &Algorithm, op: Op, reply: &[i64]) -> Result<Outcome> {
    match reply.split_first() {
        Some((1, rest)) => algorithm.decode(op, rest),
        Some((2, [])) => Err(expired()),
        Some((0, rest)) => {
            let capacity = algorithm.capacity();
            let outcome = match hold::refusal_in_reply(capacity, rest) {
                Some(held) => held,
                None => algorithm.decode(Op::Peek, rest)?,
            };
            Ok(Outcome { settle_repeated: true, ..outcome })
        }
        _ => Err(malformed("settle", reply)),
    }
}

/// The memory backend's record of applied settles: (namespace, id) → the instant (µs) from
/// which its settle is refused (its window's end), bounded by [`MAX_SETTLED_IDS`]. When more
/// settles than that fall within the window, the oldest records are dropped and `horizon`
/// rises to their window's end: a settle whose window ends no later is refused, so that no
/// settle is ever applied twice (the window shrinks under that load instead).
#[derive(Debug, Default)]
pub(crate) struct SettledIds {
    ids: HashMap<(u32, u64), u64>,
    horizon: u64,
}

impl SettledIds {
    /// Whether a settle whose window ends at `until` is refused at `now`: its window has passed,
    /// or its record may have been dropped to make room.
    pub(crate) fn refuses(&self, until: u64, now: u64) -> bool {
        now >= until || until <= self.horizon
    }

    /// Whether settle `id` of `namespace` was applied (and is still remembered at `now`).
    pub(crate) fn contains(&self, namespace: u32, id: u64, now: u64) -> bool {
        self.ids.get(&(namespace, id)).is_some_and(|&until| until > now)
    }

    /// Records settle `id` of `namespace` until `until`, making room if the record is full.
    pub(crate) fn insert(&mut self, namespace: u32, id: u64, until: u64, now: u64) {
        if self.ids.len() >= MAX_SETTLED_IDS {
            self.ids.retain(|_, &mut expiry| expiry > now);
        }
        if self.ids.len() >= MAX_SETTLED_IDS {
            // Every record is within its window: drop the oldest tenth, and refuse from now on
            // the settles as old as those (their repeats could no longer be recognised).
            let mut expiries: Vec<u64> = self.ids.values().copied().collect();
            let cut = expiries.len() / 10;
            let (_, &mut threshold, _) = expiries.select_nth_unstable(cut);
            self.ids.retain(|_, &mut expiry| expiry > threshold);
            self.horizon = self.horizon.max(threshold);
        }
        self.ids.insert((namespace, id), until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past its capacity the record drops its oldest ids and refuses the settles as old as
    /// those: an id it no longer holds is never taken for a first settle.
    #[test]
    fn a_full_record_refuses_what_it_dropped() {
        let mut ids = SettledIds::default();
        for id in 0..MAX_SETTLED_IDS as u64 + 1 {
            ids.insert(1, id, 1_000 + id, 0);
        }
        assert!(ids.contains(1, MAX_SETTLED_IDS as u64, 0), "the newest id is held");
        for id in 0..MAX_SETTLED_IDS as u64 {
            assert!(ids.contains(1, id, 0) || ids.refuses(1_000 + id, 0), "id {id} is neither held nor refused");
        }
        assert!(!ids.refuses(1_000 + MAX_SETTLED_IDS as u64 + 1, 0), "a newer settle is accepted");
        assert!(ids.refuses(5, 5), "a settle past its window is refused");
    }
}
