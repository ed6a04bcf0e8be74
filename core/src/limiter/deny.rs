//! The deny cache on the limiter's side (see `backend/redis/deny_cache.rs`): whether a limiter
//! uses it, the local answer before a round trip, and the refusals it remembers after one.

use std::sync::Arc;

use super::{Limiter, Target};
use crate::backend::redis::deny_cache::Identity;
use crate::backend::RedisBackend;
use crate::engine::{Algorithm, Op, Outcome, Served};
use crate::error::Result;
use crate::live::Compiled;
use crate::metrics::Counter;

impl Limiter {
    /// The same limiter (same state, same metrics) with the deny cache on or off, whatever its
    /// backend's default ([`crate::RedisConfig::deny_cache`]): on, a refusal with
    /// `retry_after` R is remembered in this process, and until R has passed a `check` or
    /// `acquire` of the same limiter and key with at least the refused cost is refused from
    /// memory, with no round trip (counted in [`crate::Metrics::refused_locally`]). A `reset`,
    /// a `resume`, an `unblock` or a settle by this process, and a live override seen by it,
    /// end the entries they affect at once; a `reset`, a `resume` or an `unblock` by another
    /// process ends them within this process's next live poll (five times a second). Entries
    /// are kept per spec and key layout: limiters of one name with other specs never share
    /// them. Only Redis
    /// limiters of the counting kinds use it: a concurrent limiter's slot may be released
    /// before its `retry_after`, and memory, leased and partitions limiters decide in process
    /// already.
    pub fn with_deny_cache(&self, on: bool) -> Result<Limiter> {
        Ok(self.with(|inner| inner.deny_cache = Some(on)))
    }

    /// Whether this limiter uses the deny cache (see [`Limiter::with_deny_cache`]).
    pub fn deny_cache(&self) -> bool {
        self.deny_cache_of().is_some()
    }

    /// This limiter's `key` as the deny cache names it: with its configuration (spec and key
    /// layout), so that limiters of one name with other specs or layouts, which decide on
    /// their own, never answer for each other.
    fn identity<'a>(&'a self, key: &'a str) -> Identity<'a> {
        let config = *self.inner.deny_config.get_or_init(|| {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            format!("{:?}", self.inner.algorithm).hash(&mut hasher);
            self.inner.colocate.hash(&mut hasher);
            hasher.finish()
        });
        Identity { kind: self.kind(), name: &self.inner.name, key, config }
    }

    /// What [`Limiter::remember_refusal`] needs to know of the deny cache before a call is sent
    /// (see `DenyCache::ticket`); 0 when the limiter uses none.
    #[inline]
    pub(crate) fn deny_ticket(&self) -> u64 {
        self.deny_cache_of().map_or(0, |backend| backend.deny_cache.ticket())
    }

    /// The backend whose deny cache this limiter uses, if it uses one.
    #[inline]
    fn deny_cache_of(&self) -> Option<&Arc<RedisBackend>> {
        let Target::Redis { backend, .. } = &self.inner.target else { return None };
        if matches!(self.inner.algorithm, Algorithm::Concurrent(_) | Algorithm::Leased(_)) {
            return None;
        }
        self.inner.deny_cache.unwrap_or(backend.deny_cache.default_on).then_some(backend)
    }

    /// A refusal of check `op` on `key` from the deny cache, counted, when it holds one.
    #[inline]
    pub(crate) fn refused_locally(
        &self,
        key: &str,
        op: Op,
        over: Option<&Arc<Compiled>>,
        started: std::time::Instant,
    ) -> Option<Outcome> {
        let Op::Check { cost, .. } = op else { return None };
        let backend = self.deny_cache_of()?;
        let now = backend.fallback.clock.now_micros();
        let decision = backend.deny_cache.refused(self.identity(key), cost, now, over)?;
        let m = &self.inner.metrics;
        m.add(Counter::Refused, 1);
        m.add(Counter::RefusedLocally, 1);
        self.time(crate::observe::Call::Check, Counter::RefusedLocally, Some(started));
        Some(Outcome::of(decision))
    }

    /// Remembers `result` when it is a refusal of check `op` on `key` that Redis decided under
    /// `over`, sent after [`Limiter::deny_ticket`] returned `ticket`.
    #[inline]
    pub(crate) fn remember_refusal(
        &self,
        key: &str,
        op: Op,
        result: &Result<Outcome>,
        over: Option<Arc<Compiled>>,
        ticket: u64,
    ) {
        let (Op::Check { cost, .. }, Ok(outcome)) = (op, result) else { return };
        if outcome.decision.allowed || outcome.served != Served::Backend {
            return;
        }
        let Some(backend) = self.deny_cache_of() else { return };
        let now = backend.fallback.clock.now_micros();
        backend.deny_cache.remember(self.identity(key), cost, now, &outcome.decision, over, ticket);
    }

    /// Forgets this process's remembered refusals of `key` (validated), if any: its state
    /// changed here (reset, resume, unblock, and a settle, which calls this). Other processes
    /// learn of a reset, a resume or an unblock through the live poll (see
    /// `backend/redis/cleared.rs`).
    pub(crate) fn forget_refusal(&self, key: &str) {
        if let Target::Redis { backend, .. } = &self.inner.target {
            backend.deny_cache.forget(self.identity(key));
        }
    }
}
