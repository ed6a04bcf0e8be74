//! The Redis side of leased partitions: `partitions.lua` leases, renews and gives back
//! partitions for one member (a limiter in one process), by fair share.
//!
//! Two processes never spend one partition in the same instant, whatever their clocks say:
//! - a lease's expiry is set by the Redis server (`now + lease_ttl` by its TIME) and a partition
//!   is granted to another member only once that expiry has passed, or the holder gave it back;
//! - the holder stops earning at a local deadline of `lease_ttl` (less a margin for clock-rate
//!   drift) after the instant it *sent* the call, on its own clock. That instant comes before the
//!   server read its TIME, so the deadline falls before the server's expiry in real time: only
//!   durations are compared, never two clocks' readings;
//! - a holder above its fair share drops the excess locally first, and only then gives it back.

use std::sync::atomic::AtomicBool;

use crate::backend::redis::evalsha;
use crate::backend::redis::keys::KeyBuilder;
use crate::backend::RedisBackend;
use crate::engine::contract::malformed;
use crate::engine::partitions::pacing::Held;
use crate::engine::partitions::{Partitions, SCRIPT};
use crate::engine::Kind;
use crate::error::Result;

/// The key roles: leases (`l`), the fencing token (`t`), live members of the shared class (`m`)
/// and of the priority class (`q`).
const ROLES: [&str; 2] = ["l", "t"];

/// What a lease call answered.
#[derive(Debug)]
pub(crate) struct Granted {
    /// The member's fair share when it was decided.
    pub target: u32,
    /// Live members of the class.
    pub members: u32,
    /// The partitions held after the call (deadlines set by the caller).
    pub held: Vec<Held>,
}

/// The part of a lease's term the holder does not spend: the clocks of two machines may run at
/// slightly different rates (NTP slews by at most 0.05%); 1% of the term, and at least 1 ms.
pub(crate) fn drift_margin(ttl_us: u64) -> u64 {
    (ttl_us / 100).max(1000)
}

fn cmd(backend: &RedisBackend, params: &Partitions, name: &str, key: &str, verb: &str, member: &str) -> redis::Cmd {
    let keys = KeyBuilder::new(backend.prefix(), Kind::Partitions, name, key);
    let mut cmd = SCRIPT.evalsha(3);
    for role in ROLES {
        cmd.arg(keys.key(role));
    }
    cmd.arg(keys.key(if params.priority { "q" } else { "m" }));
    let (first, end) = params.pool();
    cmd.arg(verb);
    match backend.manual_now() {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    cmd.arg(first).arg(end).arg(params.ttl_us).arg(member);
    cmd
}

/// Leases for `member`: renews what it holds, takes free partitions up to its fair share.
/// `sent_at` is the caller's clock when the call is made: each partition's deadline is
/// `sent_at + lease_ttl - drift_margin`.
pub(crate) async fn lease(
    backend: &RedisBackend,
    params: &Partitions,
    name: &str,
    key: &str,
    member: &str,
    sent_at: u64,
) -> Result<Granted> {
    let cmd = cmd(backend, params, name, key, "lease", member);
    let sent = AtomicBool::new(false);
    let reply = evalsha::run_cmd(backend.connections(), backend.deadline(), &SCRIPT, cmd, &sent).await?;
    let [_now, target, members, pairs @ ..] = reply.as_slice() else { return Err(malformed("partitions", &reply)) };
    if pairs.len() % 2 != 0 {
        return Err(malformed("partitions", &reply));
    }
    let deadline = (sent_at + params.ttl_us).saturating_sub(drift_margin(params.ttl_us));
    let held = pairs
        .chunks_exact(2)
        .map(|p| Held { index: p[0].max(0) as u32, token: p[1].max(0) as u64, deadline })
        .collect();
    Ok(Granted { target: (*target).max(0) as u32, members: (*members).max(0) as u32, held })
}

/// Gives back `indexes` (empty: every partition `member` holds, and the member leaves the class).
/// Returns how many were given back.
pub(crate) async fn release(
    backend: &RedisBackend,
    params: &Partitions,
    name: &str,
    key: &str,
    member: &str,
    indexes: &[u32],
) -> Result<u64> {
    let mut cmd = cmd(backend, params, name, key, "release", member);
    for index in indexes {
        cmd.arg(*index);
    }
    let sent = AtomicBool::new(false);
    let reply = evalsha::run_cmd(backend.connections(), backend.deadline(), &SCRIPT, cmd, &sent).await?;
    match reply.as_slice() {
        [_now, released] => Ok((*released).max(0) as u64),
        _ => Err(malformed("partitions", &reply)),
    }
}
