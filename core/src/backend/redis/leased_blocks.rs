//! Blocks reach the leases other processes hold. A leased token bucket spends its lease in
//! process, without a round trip, so a block written by another process would be seen only at
//! the holder's next round trip (up to `lease_ttl` later). A block of a leased limiter, set or
//! ended, therefore also counts up `<prefix>:{registry}:blocks`; the live task (see [`super::live`]),
//! which polls the registry five times a second, reads that counter with the overrides'
//! identity and, when it changed, has every leased limiter of the process re-read the block of
//! each key it holds tokens for. The process that blocks applies its block at once.

use std::sync::Weak;

use parking_lot::Mutex;

use super::connection::Conn;
use super::keys::KeyBuilder;
use super::RedisBackend;
use crate::engine::hold::Hold;
use crate::engine::{Colocate, Kind};
use crate::error::Result;

/// A leased limiter's lease pool, as the backend sees it to bring its keys' blocks up to date.
pub(crate) trait BlockWatcher: Send + Sync {
    /// The limiter's name and where its keys take their hash tag from.
    fn identity(&self) -> (&str, Colocate);
    /// The keys this process holds lease tokens for, or holds as blocked.
    fn watched_keys(&self) -> Vec<Box<str>>;
    /// Applies the block of `key` as Redis holds it: the instant (µs, the backend's clock) it
    /// ends, if any.
    fn block_read(&self, key: &str, until_micros: Option<u64>);
    /// Forgets the refusal from Redis this process remembers for `key` (every key: `None`):
    /// another process let it back in (see [`super::cleared`]).
    fn forget_refused(&self, key: Option<&str>);
}

/// The leased limiters of a backend, and the last count of blocks seen.
#[derive(Default)]
pub(crate) struct Watchers {
    pools: Mutex<Vec<Weak<dyn BlockWatcher>>>,
    seen: Mutex<Option<String>>,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchers").field("pools", &self.pools.lock().len()).finish()
    }
}

impl Watchers {
    /// Adds a leased limiter's pool (dropped ones are swept as others are added).
    pub(crate) fn watch(&self, pool: Weak<dyn BlockWatcher>) {
        let mut pools = self.pools.lock();
        pools.retain(|p| p.strong_count() > 0);
        pools.push(pool);
    }

    pub(crate) fn live(&self) -> Vec<std::sync::Arc<dyn BlockWatcher>> {
        self.pools.lock().iter().filter_map(Weak::upgrade).collect()
    }
}

impl RedisBackend {
    /// The key of the blocks counter, in the registry's hash tag: the live poll reads it and
    /// hands it to [`RedisBackend::blocks_counted`].
    pub(crate) fn blocks_counter_key(&self) -> String {
        format!("{}:{{registry}}:blocks", self.prefix())
    }

    /// Tells the other processes that a leased limiter's block changed (see the module
    /// documentation).
    pub(crate) async fn announce_leased_block(&self) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.incr(self.blocks_counter_key(), 1).ignore();
        self.query_via::<()>(None, &pipe).await
    }

    /// Called by the live task with the blocks counter it read: when it changed, every leased
    /// limiter re-reads the blocks of the keys it holds.
    pub(crate) async fn blocks_counted(&self, count: Option<String>, own: &mut Option<Conn>) -> Result<()> {
        {
            let mut seen = self.watchers.seen.lock();
            if *seen == count {
                return Ok(());
            }
            *seen = count;
        }
        let mut first_error = None;
        for pool in self.watchers.live() {
            let (name, colocate) = pool.identity();
            let name = name.to_owned();
            for key in pool.watched_keys() {
                let keys = KeyBuilder::for_limiter(self.prefix(), Kind::Leased, &name, &key, colocate);
                let mut pipe = redis::pipe();
                pipe.get(keys.key(Hold::Block.key_role()));
                match self.query_via::<(Option<u64>,)>(Some(&mut *own), &pipe).await {
                    Ok((until,)) => pool.block_read(&key, until),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if first_error.is_some() {
            // Read again at the next poll: no count Redis holds looks like this.
            *self.watchers.seen.lock() = Some(String::from("unread"));
        }
        first_error.map_or(Ok(()), Err)
    }
}
