//! Settles (see [`crate::Limiter::settle`]): what every engine shares to apply a settle once
//! per id. Each engine's own rule for a settle (what a charge or a refund does to its state) is
//! in the engine's file, beside its `.lua`; the once-per-id record is written once, here for the
//! memory backend ([`SettledIds`]) and in the scripts' wrapper for Redis (`SETTLE` in
//! [`super::script`]).

use std::collections::HashMap;

use super::contract::{malformed, Op, Outcome};
use super::{block, pause, Algorithm};
use crate::error::Result;

/// The role of an identity's record of applied settles (`…:settled:<key>`): same identity, same
/// hash tag as the engine's keys.
pub(crate) const ROLE: &str = "settled";

/// The most settle ids one memory backend remembers: beyond it, the records whose state has
/// expired go first, then the ones expiring soonest.
pub(crate) const MAX_SETTLED_IDS: usize = 100_000;

/// The settle id of `op`, if it is a settle.
#[inline]
pub(crate) fn id_of(op: Op) -> Option<u64> {
    match op {
        Op::Settle { id, .. } => Some(id),
        _ => None,
    }
}

/// The outcome of a settle from its script's reply `{applied, engine reply…}`: the engine's
/// reading of a settle when it applied, of a peek when its id had been applied before.
pub(crate) fn decode(algorithm: &Algorithm, op: Op, reply: &[i64]) -> Result<Outcome> {
    match reply.split_first() {
        Some((1, rest)) => algorithm.decode(op, rest),
        Some((0, rest)) => {
            let capacity = algorithm.capacity();
            let held = pause::refusal_in_reply(capacity, rest).or_else(|| block::refusal_in_reply(capacity, rest));
            let outcome = match held {
                Some(held) => held,
                None => algorithm.decode(Op::Peek, rest)?,
            };
            Ok(Outcome { settle_repeated: true, ..outcome })
        }
        _ => Err(malformed("settle", reply)),
    }
}

/// The memory backend's record of applied settles: (namespace, id) → the instant (µs) after
/// which the state it guards is gone, bounded by [`MAX_SETTLED_IDS`].
#[derive(Debug, Default)]
pub(crate) struct SettledIds {
    ids: HashMap<(u32, u64), u64>,
}

impl SettledIds {
    /// Whether settle `id` of `namespace` was applied and its state still lives at `now`.
    pub(crate) fn contains(&self, namespace: u32, id: u64, now: u64) -> bool {
        self.ids.get(&(namespace, id)).is_some_and(|&until| until > now)
    }

    /// Records settle `id` of `namespace` until `until`, making room if the record is full.
    pub(crate) fn insert(&mut self, namespace: u32, id: u64, until: u64, now: u64) {
        if self.ids.len() >= MAX_SETTLED_IDS {
            self.ids.retain(|_, &mut expiry| expiry > now);
        }
        if self.ids.len() >= MAX_SETTLED_IDS {
            // Every record still guards live state: drop the soonest-expiring tenth, which a
            // repeat is least likely to reach.
            let mut expiries: Vec<u64> = self.ids.values().copied().collect();
            let cut = expiries.len() / 10;
            let (_, &mut threshold, _) = expiries.select_nth_unstable(cut);
            self.ids.retain(|_, &mut expiry| expiry > threshold);
        }
        self.ids.insert((namespace, id), until);
    }
}
