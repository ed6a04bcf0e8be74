//! Pauses: a third party said "stop" (an HTTP 429 or 503), so every process refuses calls on
//! one limiter and key until it said to come back (see [`crate::Limiter::pause`]).
//!
//! A pause is not an engine: it is checked before any engine runs, in the memory backend
//! ([`crate::backend::MemoryBackend`]) and, on Redis, by the pause check every engine's script
//! starts with (`HOLD_PRELUDE` in [`super::script`]), so a paused check costs no extra round
//! trip. A paused refusal consumes nothing and says how long the pause has left.

use std::sync::LazyLock;
use std::time::Duration;

use super::contract::{malformed, Op, Outcome};
use super::script::LuaScript;
use crate::error::Result;

/// The role of the pause key (`…:p:<key>`): same identity, same hash tag as the engine's keys.
pub(crate) const ROLE: &str = "p";

/// What a paused call's script returns first (no engine's reply starts with a negative number).
const PAUSED: i64 = -1;

/// `pause.lua`: sets or extends a pause.
pub(crate) static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("pause", include_str!("pause.lua")));

/// Whether a pause refuses `op`: checks and peeks. Releases, extensions, abandons and
/// `points_used` corrections still apply (a lease held before the pause must be releasable).
#[inline]
pub(crate) fn applies_to(op: Op) -> bool {
    matches!(op, Op::Check { .. } | Op::Take { .. } | Op::Peek)
}

/// The refusal of a paused call: nothing available until the pause ends `remaining_us` after
/// `now`, by which time the limiter is no fuller than the pause says (its own state is not read).
pub(crate) fn refusal(capacity: u64, remaining_us: u64, now: u64) -> Outcome {
    let mut d = super::decision(false, capacity, 0, remaining_us, remaining_us);
    d.decided_at_micros = now;
    Outcome { held: true, ..Outcome::of(d) }
}

/// The refusal a script's reply carries when the pause check answered it, else `None`.
#[inline]
pub(crate) fn refusal_in_reply(capacity: u64, reply: &[i64]) -> Option<Outcome> {
    match *reply {
        [PAUSED, remaining_us, now] => Some(refusal(capacity, remaining_us.max(1) as u64, now.max(0) as u64)),
        _ => None,
    }
}

/// The pause in effect from `pause.lua`'s reply.
pub(crate) fn in_effect(reply: &[i64]) -> Result<Duration> {
    match *reply {
        [remaining_us, _now] => Ok(Duration::from_micros(remaining_us.max(0) as u64)),
        _ => Err(malformed("pause", reply)),
    }
}
