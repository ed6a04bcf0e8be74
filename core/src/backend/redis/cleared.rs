//! Resets and the early ends of holds reach the deny caches of other processes. A process remembers
//! refusals (see [`super::deny_cache`], and a leased token bucket's lease pool) for up to their
//! `retry_after`: a block's or a pause's whole length. When an operator lets a key back in from another process (the CLI, the Limits
//! page, another worker), every process must forget its remembered refusals of that key, or it
//! keeps refusing from memory what Redis now admits.
//!
//! So a reset, and the end of a hold (a pause or a block) that was in effect, each append the
//! key to a short feed under the registry's hash tag: a counter (`…:{registry}:cleared:n`)
//! and a sorted set of the latest [`FEED_LEN`] clears scored by their count
//! (`…:{registry}:cleared`), both with a TTL of [`FEED_TTL`]. The live task (see
//! [`super::live`]) reads the counter with the overrides' identity, five times a second, and
//! when it moved reads the clears after the last it applied and forgets their keys' entries (and
//! the leased limiters' remembered refusals of those keys).
//! When it cannot be sure it saw every clear (the counter went back: the feed expired or Redis
//! lost it; or the oldest clear it reads is not the next one: more than [`FEED_LEN`] clears since
//! its last poll), it forgets every entry: each one only saves a round trip.

use std::time::Duration;

use super::connection::Conn;
use super::deny_cache::{entry_key, Identity};
use super::RedisBackend;
use crate::engine::Kind;
use crate::error::Result;

/// The most clears the feed keeps: a process that misses more between two polls forgets all.
pub(crate) const FEED_LEN: u64 = 1000;

/// How long the feed outlives its last clear.
pub(crate) const FEED_TTL: Duration = Duration::from_secs(24 * 3600);

/// Appends a clear and trims the feed: `KEYS` the counter and the feed; `ARGV` the clear (kind,
/// name and key, NUL-separated), the feed's length, its TTL (ms).
const APPEND: &str = r#"
local n = redis.call('INCR', KEYS[1])
redis.call('ZADD', KEYS[2], n, n .. ':' .. ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return n
"#;

/// The key of the clears' counter, in the registry's hash tag.
fn counter_key(prefix: &str) -> String {
    format!("{prefix}:{{registry}}:cleared:n")
}

fn feed_key(prefix: &str) -> String {
    format!("{prefix}:{{registry}}:cleared")
}

/// Whether limiters of `kind` may remember refusals: the counting kinds in the deny cache (see
/// `Limiter::with_deny_cache`), a leased token bucket in its lease pool.
fn remembers(kind: Kind) -> bool {
    !matches!(kind, Kind::Concurrent | Kind::Partitions | Kind::Unlimited)
}

impl RedisBackend {
    /// The key of the clears' counter: the live poll reads it and hands it to
    /// [`RedisBackend::clears_counted`].
    pub(crate) fn clears_counter_key(&self) -> String {
        counter_key(self.prefix())
    }

    /// Tells the other processes that (`kind`, `name`, `key`) was let back in. A failure is
    /// ignored: the state changed, and the other processes' entries end at their
    /// `retry_after` at the latest.
    pub(crate) async fn announce_cleared(&self, kind: Kind, name: &str, key: &str) {
        if !remembers(kind) {
            return;
        }
        let named = entry_key(Identity { kind, name, key, config: 0 });
        let mut eval = redis::cmd("EVAL");
        eval.arg(APPEND).arg(2).arg(counter_key(self.prefix())).arg(feed_key(self.prefix()));
        eval.arg(named).arg(FEED_LEN).arg(FEED_TTL.as_millis() as u64);
        let mut pipe = redis::pipe();
        pipe.add_command(eval).ignore();
        let _ = self.query_via::<()>(None, &pipe).await;
    }

    /// Called by the live task with the clears' counter it read: forgets the entries of the
    /// clears made since the last poll (see the module documentation).
    pub(crate) async fn clears_counted(&self, count: Option<String>, own: &mut Option<Conn>) -> Result<()> {
        let count = count.and_then(|c| c.parse::<u64>().ok()).unwrap_or(0);
        let cache = &self.deny_cache;
        let seen = *cache.feed_seen.lock();
        let from = match seen {
            Some(seen) if seen == count => return Ok(()),
            None => {
                // The first poll: the clears before it predate this process's entries (but for
                // one made while this process's first refusals were in flight, which then lives
                // until its retry_after, as before the feed).
                *cache.feed_seen.lock() = Some(count);
                return Ok(());
            }
            Some(seen) if seen > count => {
                // The counter went back: the feed expired, or Redis lost it.
                cache.forget_for_another_process(None);
                self.leased_forget(None);
                *cache.feed_seen.lock() = Some(count);
                return Ok(());
            }
            Some(seen) => seen,
        };
        if cache.is_empty() && self.watchers.live().is_empty() {
            // Nothing remembered to forget (a refusal in flight is not remembered after this).
            cache.forget_for_another_process(Some(&[]));
            *cache.feed_seen.lock() = Some(count);
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGEBYSCORE").arg(feed_key(self.prefix())).arg(format!("({from}")).arg("+inf");
        let (clears,): (Vec<Vec<u8>>,) = self.query_via(Some(own), &pipe).await?;
        let mut next = from + 1;
        let mut named = Vec::with_capacity(clears.len());
        let mut complete = true;
        for clear in &clears {
            let clear = String::from_utf8_lossy(clear);
            let Some((n, what)) = clear.split_once(':') else { continue };
            if n.parse::<u64>().ok() != Some(next) {
                complete = false;
                break;
            }
            next += 1;
            named.push(what.to_owned());
        }
        if complete && next > count {
            cache.forget_for_another_process(Some(&named));
            self.leased_forget(Some(&named));
        } else {
            cache.forget_for_another_process(None);
            self.leased_forget(None);
        }
        *cache.feed_seen.lock() = Some(count.max(next - 1));
        Ok(())
    }

    /// Has every leased limiter of this process forget its remembered refusals of the leased
    /// clears among `named` (every refusal: `None`).
    fn leased_forget(&self, named: Option<&[String]>) {
        let pools = self.watchers.live();
        let Some(named) = named else {
            pools.iter().for_each(|pool| pool.forget_refused(None));
            return;
        };
        let leased = Kind::Leased.as_str();
        for clear in named {
            let mut parts = clear.splitn(3, '\0');
            let (Some(kind), Some(name), Some(key)) = (parts.next(), parts.next(), parts.next()) else { continue };
            if kind != leased {
                continue;
            }
            for pool in pools.iter().filter(|pool| pool.identity().0 == name) {
                pool.forget_refused(Some(key));
            }
        }
    }
}
