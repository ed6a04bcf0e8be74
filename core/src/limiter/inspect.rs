//! What an operator reads of a limiter's state beyond one decision: a concurrent key's holders
//! and waiters, and the limiter's busiest keys (see [`crate::views`]).

use super::{Limiter, Target};
use crate::engine::Kind;
use crate::error::{Error, Result};
use crate::params::validate_key;
use crate::runtime::block_on;
use crate::views::{ConcurrentUse, KeyUse, MAX_KEYS_EXAMINED};

impl Limiter {
    /// The leases held on `key` of a concurrent limiter (a digest of each lease id, its fencing
    /// token, age and time left) and how many callers of `acquire` wait for a slot, read at one
    /// instant. Another kind of limiter is [`Error::InvalidArgument`] naming `limiter`.
    pub async fn concurrent_use(&self, key: Option<&str>) -> Result<ConcurrentUse> {
        let key = validate_key(key)?;
        if self.kind() != Kind::Concurrent {
            return Err(Error::invalid(
                "limiter",
                format!(
                    "{:?} is a {} limiter: only concurrent limiters have holders",
                    self.name(),
                    self.kind().as_str()
                ),
            ));
        }
        match &self.inner.target {
            Target::Memory { backend, namespace } => Ok(backend.concurrent_use(*namespace, key)),
            Target::Redis { backend, .. } => backend.concurrent_use(self.name(), key, self.colocate()).await,
            // Not reached: only concurrent limiters get past the kind check above.
            Target::Nowhere | Target::Partitions(_) => Ok(ConcurrentUse::default()),
        }
    }

    /// Blocking form of [`Limiter::concurrent_use`].
    pub fn concurrent_use_blocking(&self, key: Option<&str>) -> Result<ConcurrentUse> {
        block_on(self.concurrent_use(key))
    }

    /// The `count` keys of this limiter that use most of their limit now, most used first (ties
    /// by key); keys using none of it are left out. Bounded work: at most
    /// [`MAX_KEYS_EXAMINED`] keys are examined, each peeked once (consuming nothing); on Redis
    /// they are found by SCAN on every master of a Cluster (see [`crate::MAX_SCANNED_PER_MASTER`]),
    /// so a database with more keys than that may hide busier ones.
    pub async fn busiest_keys(&self, count: usize) -> Result<Vec<KeyUse>> {
        let keys = match &self.inner.target {
            Target::Memory { backend, namespace } => backend.keys_of(*namespace, MAX_KEYS_EXAMINED),
            Target::Redis { backend, .. } => {
                let role = self.inner.algorithm.state_keys()[0];
                backend.keys_of(self.kind(), self.name(), role, MAX_KEYS_EXAMINED).await?
            }
            // Leased partitions keep their use in each process (what it holds and has spent),
            // not in per-key state a reader could list.
            Target::Nowhere | Target::Partitions(_) => Vec::new(),
        };
        // Concurrent peeks share the connection and are pipelined.
        let mut peeks = tokio::task::JoinSet::new();
        for key in keys {
            let limiter = self.clone();
            peeks.spawn_on(
                async move {
                    let decision = limiter.peek(Some(&key)).await;
                    decision.map(|d| (key, d))
                },
                crate::runtime::runtime().handle(),
            );
        }
        let mut out = Vec::new();
        while let Some(joined) = peeks.join_next().await {
            let (key, d) =
                joined.map_err(|e| Error::BackendUnavailable { message: format!("a peek failed: {e}") })??;
            let used = d.limit.saturating_sub(d.remaining);
            if used > 0 {
                out.push(KeyUse { key, used, limit: d.limit, remaining: d.remaining });
            }
        }
        out.sort_by(|a, b| b.used.cmp(&a.used).then_with(|| a.key.cmp(&b.key)));
        out.truncate(count);
        Ok(out)
    }

    /// Blocking form of [`Limiter::busiest_keys`].
    pub fn busiest_keys_blocking(&self, count: usize) -> Result<Vec<KeyUse>> {
        block_on(self.busiest_keys(count))
    }
}
