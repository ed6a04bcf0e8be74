//! What an operator sees of a limiter's raw state, across keys and across every master of a
//! Cluster: a concurrent key's holders and waiters, the busiest keys of a limiter, and the
//! fleet's allowed / refused counts per minute. Read by the CLI's `inspect` and the Limits page;
//! none of it is on the path of a check.

use std::time::{Duration, SystemTime};

/// One lease held on a concurrent limiter's key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// A digest of the lease id (8 hex digits), never the id itself: whoever holds a lease id
    /// can release or extend the lease.
    pub lease: String,
    /// The fencing token of the grant; `None` when a process of an earlier ratekeeper (which
    /// did not record grants) holds it.
    pub fencing_token: Option<u64>,
    /// Time since the lease was granted (not since it was last extended); `None` as for
    /// `fencing_token`.
    pub age: Option<Duration>,
    /// Time until its lock_timeout (as last extended) passes; zero once it has.
    pub expires_in: Duration,
    /// Its lock_timeout has passed: a caller that needs the slot may reclaim it.
    pub overdue: bool,
}

/// A concurrent limiter key's holders and waiters, read at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ConcurrentUse {
    /// The leases held, oldest grant first (at most [`MAX_HOLDERS_SHOWN`]).
    pub holders: Vec<Holder>,
    /// Every lease held, overdue ones included (may exceed `holders.len()`).
    pub held: u64,
    /// Callers of `acquire` waiting for a slot now. A waiter whose process died is counted
    /// until its wait timeout would have ended.
    pub waiters: u64,
}

/// The most holders [`ConcurrentUse::holders`] lists: a limit of thousands stays readable and
/// the read stays one small reply.
pub const MAX_HOLDERS_SHOWN: usize = 200;

/// How much of its limit one key of a limiter uses now (a peek: consumes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyUse {
    /// The key (`""`: the limiter's own key, used by calls without a key).
    pub key: String,
    /// The binding limit minus what remains of it.
    pub used: u64,
    /// The binding limit (for several windows, the one with the least left).
    pub limit: u64,
    /// What remains of it.
    pub remaining: u64,
}

/// The most keys [`crate::Limiter::busiest_keys`] examines: on Redis, the first this many keys
/// of the limiter that SCAN finds on the masters (each master scanned for at most
/// [`MAX_SCANNED_PER_MASTER`] keys, 1,000 per SCAN call); in memory, the first this many found.
/// Each is peeked once.
pub const MAX_KEYS_EXAMINED: usize = 1_000;

/// The most keys SCAN walks on one master for [`crate::Limiter::busiest_keys`] (all of the
/// database's keys are walked, not only the limiter's: the pattern is matched by the server).
pub const MAX_SCANNED_PER_MASTER: usize = 100_000;

/// A limiter's checks in one minute, summed over every process that used it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MinuteCounts {
    /// The minute's first instant (by the Redis server's clock).
    pub start: SystemTime,
    /// Checks allowed (including those allowed by `fail_open` or decided by the fallback).
    pub allowed: u64,
    /// Checks refused (over the limit, shed or paused).
    pub refused: u64,
}

/// How many minutes [`crate::Backend::history`] returns.
pub const HISTORY_MINUTES: u64 = 60;

/// The digest shown for a lease id: FNV-1a of its 32 hex digits, folded to 32 bits. The same
/// in memory and on Redis (where the id is stored as those digits).
pub(crate) fn lease_digest(id_hex: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id_hex.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:08x}", (hash ^ (hash >> 32)) as u32)
}
