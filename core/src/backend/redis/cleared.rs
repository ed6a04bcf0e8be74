//! Resets and the early ends of holds reach the memories of refusals of other processes. A
//! process remembers refusals (its memories, [`RedisBackend::memories`]: the deny cache, a
//! leased token bucket's lease pool) for up to their `retry_after`: a block's or a pause's
//! whole length. When an operator lets a key back in from another process (the CLI, the Limits
//! page, another worker), every process must forget its remembered refusals of that key, or it
//! keeps refusing from memory what Redis now admits.
//!
//! So a reset, and the end of a hold (a pause or a block) that was in effect, each append the
//! key to a short feed under the registry's hash tag: a counter (`…:{registry}:cleared:n`)
//! and a sorted set of the latest [`FEED_LEN`] clears scored by their count
//! (`…:{registry}:cleared`), both with a TTL of [`FEED_TTL`]. The live task (see
//! [`super::live`]) reads the counter with the overrides' identity, five times a second, and
//! when it moved reads the clears after the last it applied and has every memory forget its
//! refusals of their keys ([`Remembers`]).
//! When it cannot be sure it saw every clear (the counter went back: the feed expired or Redis
//! lost it; or the oldest clear it reads is not the next one: more than [`FEED_LEN`] clears since
//! its last poll), every memory forgets every refusal: each one only saves a round trip.

use std::time::Duration;

use super::connection::Conn;
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

/// What a clear names: a limiter's key, `kind \0 name \0 key` (names contain no NUL; a key's
/// bytes end it). A memory of refusals files its entries under it.
pub(crate) fn clear_name(kind: Kind, name: &str, key: &str) -> String {
    let mut k = String::with_capacity(kind.as_str().len() + name.len() + key.len() + 2);
    k.push_str(kind.as_str());
    k.push('\0');
    k.push_str(name);
    k.push('\0');
    k.push_str(key);
    k
}

/// A memory of refusals in this process, which forgets those of a key another process let back
/// in (see [`RedisBackend::memories`]).
pub(crate) trait Remembers {
    /// Whether it remembers nothing now (then no clear needs reading).
    fn remembers_nothing(&self) -> bool;

    /// Forgets its refusals of the keys `named` (as [`clear_name`] names them), or every one
    /// (`None`: clears were missed). Called on every poll that saw clears, `named` empty when
    /// nothing was remembered: a refusal in flight before it is not remembered after it.
    fn forget_cleared(&self, named: Option<&[String]>);
}

/// Whether limiters of `kind` may remember refusals (see [`RedisBackend::memories`]): the
/// counting kinds, a leased token bucket in its lease pool.
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
        let named = clear_name(kind, name, key);
        let mut eval = redis::cmd("EVAL");
        eval.arg(APPEND).arg(2).arg(counter_key(self.prefix())).arg(feed_key(self.prefix()));
        eval.arg(named).arg(FEED_LEN).arg(FEED_TTL.as_millis() as u64);
        let mut pipe = redis::pipe();
        pipe.add_command(eval).ignore();
        let _ = self.query_via::<()>(None, &pipe).await;
    }

    /// Called by the live task with the clears' counter it read: this process's memories of
    /// refusals ([`RedisBackend::memories`]) forget those of the clears made since the last
    /// poll (see the module documentation).
    pub(crate) async fn clears_counted(&self, count: Option<String>, own: &mut Option<Conn>) -> Result<()> {
        let count = count.and_then(|c| c.parse::<u64>().ok()).unwrap_or(0);
        let forget = |named: Option<&[String]>| self.memories().iter().for_each(|m| m.forget_cleared(named));
        let seen = *self.clears_seen.lock();
        let from = match seen {
            Some(seen) if seen == count => return Ok(()),
            None => {
                // The first poll: the clears before it predate this process's entries (but for
                // one made while this process's first refusals were in flight, which then lives
                // until its retry_after, as before the feed).
                *self.clears_seen.lock() = Some(count);
                return Ok(());
            }
            Some(seen) if seen > count => {
                // The counter went back: the feed expired, or Redis lost it.
                forget(None);
                *self.clears_seen.lock() = Some(count);
                return Ok(());
            }
            Some(seen) => seen,
        };
        if self.memories().iter().all(|m| m.remembers_nothing()) {
            // Nothing remembered to forget (a refusal in flight is not remembered after this).
            forget(Some(&[]));
            *self.clears_seen.lock() = Some(count);
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
        forget(Some(&named).filter(|_| complete && next > count).map(Vec::as_slice));
        *self.clears_seen.lock() = Some(count.max(next - 1));
        Ok(())
    }
}
