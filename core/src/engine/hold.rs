//! Holds: an identity (one limiter and key) refused for a while, whatever its state, in every
//! process. A hold has a role:
//! - a **pause**: a third party said "stop" (an HTTP 429 or 503), so every process refuses
//!   until it said to come back ([`crate::Limiter::pause`]);
//! - a **block**: a key refused for a while, after a refusal when its limiter says so
//!   (rate-limiter-flexible's `blockDuration`) or by hand ([`crate::Limiter::block`]); the
//!   policy is `limiter/block.rs`.
//!
//! Either ends at its instant, or early by its role's own call (`limiter/hold.rs`, one for
//! both roles).
//!
//! Both are one mechanism: an instant (µs) the hold ends, per role, per identity. A hold is
//! not an engine: it is checked before any engine runs, in the memory backend
//! (`backend/holds.rs`) and, on Redis, by the hold check every engine's script starts with
//! (`hold_check.lua`, see [`super::lua`]), which looks for both roles' keys in one `EXISTS`
//! (and reads them in one `MGET` when one exists), so a held check costs no extra round trip
//! and a hold set by one process is seen by the next check of every other. Each role has a key
//! of its own (same identity, same hash tag) so that ending one role's hold never ends the
//! other's, and metrics count blocked refusals apart. A held refusal consumes nothing and
//! says how long the hold has left. `hold.lua` sets or extends either role's hold.

use std::sync::LazyLock;
use std::time::Duration;

use super::contract::{malformed, Op, Outcome};
use super::lua::LuaScript;
use crate::error::Result;

/// The role of a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// See [`crate::Limiter::pause`].
    Pause,
    /// See [`crate::Limiter::block`].
    Block,
}

impl Hold {
    /// Every role, in the order the hold check passes their keys (see `hold_check.lua`).
    pub(crate) const ALL: [Hold; 2] = [Hold::Pause, Hold::Block];

    /// The role of the hold's key (`…:p:<key>`, `…:bk:<key>`): same identity, same hash tag as
    /// the engine's keys. Unchanged since pauses and blocks had scripts of their own, so holds
    /// set by an earlier version are still seen.
    pub(crate) fn key_role(self) -> &'static str {
        match self {
            Hold::Pause => "p",
            Hold::Block => "bk",
        }
    }

    /// What a held call's script returns first (no engine's reply starts with a negative
    /// number).
    fn marker(self) -> i64 {
        match self {
            Hold::Pause => -1,
            Hold::Block => -2,
        }
    }

    /// The hold that refuses a call when a pause ends at `paused_until` and a block at
    /// `blocked_until` (µs; 0: none), and how long it has left at `now`: the block, unless a
    /// pause ends later (as the hold check in `hold_check.lua` decides).
    pub(crate) fn in_force(paused_until: u64, blocked_until: u64, now: u64) -> Option<(Hold, u64)> {
        if blocked_until > now && blocked_until >= paused_until {
            Some((Hold::Block, blocked_until - now))
        } else if paused_until > now {
            Some((Hold::Pause, paused_until - now))
        } else {
            None
        }
    }
}

/// How a hold is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldMode {
    /// The hold ends `duration` from now, whatever was in effect (a block by hand).
    Set,
    /// A hold in effect that ends later is kept (a pause; the block a refusal starts).
    Extend,
}

impl HoldMode {
    /// The verb `hold.lua` reads.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            HoldMode::Set => "set",
            HoldMode::Extend => "extend",
        }
    }
}

/// `hold.lua`: sets, or extends, a hold of either role.
pub(crate) static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("hold", include_str!("hold.lua")));

/// Whether a hold refuses `op`: checks and peeks. Releases, extensions, abandons and
/// `points_used` corrections still apply (a lease held before the hold must be releasable).
#[inline]
pub(crate) fn applies_to(op: Op) -> bool {
    matches!(op, Op::Check { .. } | Op::Take { .. } | Op::Peek)
}

/// The refusal of a call held by `hold`: nothing available until the hold ends `remaining_us`
/// after `now`, by which time the limiter is no fuller than the hold says (its own state is not
/// read).
pub(crate) fn refusal(hold: Hold, capacity: u64, remaining_us: u64, now: u64) -> Outcome {
    let mut d = super::decision(false, capacity, 0, remaining_us, remaining_us);
    d.decided_at_micros = now;
    Outcome { held: true, blocked: hold == Hold::Block, ..Outcome::of(d) }
}

/// The refusal a script's reply carries when the hold check answered it, else `None`.
#[inline]
pub(crate) fn refusal_in_reply(capacity: u64, reply: &[i64]) -> Option<Outcome> {
    let [marker, remaining_us, now] = *reply else { return None };
    let hold = Hold::ALL.into_iter().find(|hold| hold.marker() == marker)?;
    Some(refusal(hold, capacity, remaining_us.max(1) as u64, now.max(0) as u64))
}

/// The hold in effect from `hold.lua`'s reply.
pub(crate) fn in_effect(reply: &[i64]) -> Result<Duration> {
    match *reply {
        [remaining_us, _now] => Ok(Duration::from_micros(remaining_us.max(0) as u64)),
        _ => Err(malformed("hold", reply)),
    }
}
