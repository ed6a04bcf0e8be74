//! Blocks: a key refused for a while, by the limiter's `block_for` option after a refusal
//! (rate-limiter-flexible's `blockDuration`) or by hand ([`crate::Limiter::block`]).
//!
//! A block is checked where a pause is, before any engine runs: in the memory backend and, on
//! Redis, by the hold check every engine's script starts with (`HOLD_PRELUDE` in
//! [`super::script`]), which looks for the pause key and the block key in one `EXISTS` (and reads
//! them in one `MGET` when one exists), so a blocked check costs no extra round trip. It has a key of its own (same identity, same hash tag) so
//! that pauses and blocks stay apart: `resume` ends a pause only, `unblock` a block only, and
//! metrics count blocked refusals apart. A blocked refusal consumes nothing and says how long
//! the block has left.

use std::sync::LazyLock;
use std::time::Duration;

use super::contract::{malformed, Outcome};
use super::script::LuaScript;
use crate::error::Result;

/// The role of the block key (`…:bk:<key>`): same identity, same hash tag as the engine's keys.
pub(crate) const ROLE: &str = "bk";

/// What a blocked call's script returns first (no engine's reply starts with a negative
/// number; a pause's starts with -1).
pub(crate) const BLOCKED: i64 = -2;

/// `block.lua`: sets, or extends, a block.
pub(crate) static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("block", include_str!("block.lua")));

/// How a block is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockMode {
    /// By hand: the block ends `duration` from now, whatever was in effect.
    Set,
    /// After a refusal under `block_for`: a block in effect that ends later is kept.
    Extend,
}

impl BlockMode {
    /// The verb `block.lua` reads.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            BlockMode::Set => "set",
            BlockMode::Extend => "extend",
        }
    }
}

/// The refusal of a blocked call: nothing available until the block ends `remaining_us` after
/// `now` (the limiter's own state is not read).
pub(crate) fn refusal(capacity: u64, remaining_us: u64, now: u64) -> Outcome {
    let mut outcome = super::pause::refusal(capacity, remaining_us, now);
    outcome.blocked = true;
    outcome
}

/// The refusal a script's reply carries when the hold check answered it with a block.
#[inline]
pub(crate) fn refusal_in_reply(capacity: u64, reply: &[i64]) -> Option<Outcome> {
    match *reply {
        [BLOCKED, remaining_us, now] => Some(refusal(capacity, remaining_us.max(1) as u64, now.max(0) as u64)),
        _ => None,
    }
}

/// The block in effect from `block.lua`'s reply.
pub(crate) fn in_effect(reply: &[i64]) -> Result<Duration> {
    match *reply {
        [remaining_us, _now] => Ok(Duration::from_micros(remaining_us.max(0) as u64)),
        _ => Err(malformed("block", reply)),
    }
}
