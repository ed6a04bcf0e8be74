//! The deny cache on the limiter's side (see `backend/redis/deny_cache.rs`): whether a limiter
//! uses it, the local answer before a round trip, and the refusals it remembers after one.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::pipeline::{Call, Policy};
use super::{Limiter, Target};
use crate::backend::redis::deny_cache::Identity;
use crate::backend::RedisBackend;
use crate::engine::{Algorithm, Op, Outcome, Served};
use crate::error::Result;
use crate::metrics::Counter;

/// The deny cache on a limiter: on, off, or the backend's default (`None`), and the cache's
/// fingerprint of the limiter's spec and key layout, made at first use.
#[derive(Debug, Default)]
pub(crate) struct DenyCache {
    on: Option<bool>,
    fingerprint: OnceLock<u64>,
}

/// A changed copy of a limiter makes its own fingerprint (its spec or layout may differ).
impl Clone for DenyCache {
    fn clone(&self) -> Self {
        DenyCache { on: self.on, fingerprint: OnceLock::new() }
    }
}

impl Policy for DenyCache {
    /// What [`Policy::after`] needs to know of the cache before the call was sent (see
    /// `DenyCache::ticket`); 0 when the limiter uses none.
    type State = u64;

    /// A call whose refusals are not enforced neither reads nor writes the cache (another
    /// handle of the same name may be enforcing).
    #[inline]
    fn before(&self, limiter: &Limiter, key: &str, call: &Call) -> std::result::Result<u64, Outcome> {
        let Some(backend) = limiter.deny_cache_of() else { return Ok(0) };
        if let (Op::Check { cost, .. }, true) = (call.op, call.enforced) {
            let now = backend.fallback.clock.now_micros();
            if let Some(decision) = backend.deny_cache.refused(limiter.identity(key), cost, now, call.over.as_ref()) {
                let m = &limiter.inner.metrics;
                m.add(Counter::Refused, 1);
                m.add(Counter::RefusedLocally, 1);
                limiter.time(crate::observe::Call::Check, Counter::RefusedLocally, call.started);
                return Err(Outcome::of(decision));
            }
        }
        Ok(backend.deny_cache.ticket())
    }

    /// Remembers a refusal of a check that Redis decided.
    #[inline]
    fn after(
        &self,
        limiter: &Limiter,
        key: &str,
        call: &Call,
        ticket: u64,
        _: Option<Duration>,
        result: &mut Result<Outcome>,
    ) {
        if let (Op::Check { cost, .. }, Ok(outcome), true) = (call.op, &*result, call.enforced) {
            if !outcome.decision.allowed && outcome.served == Served::Backend {
                if let Some(backend) = limiter.deny_cache_of() {
                    let now = backend.fallback.clock.now_micros();
                    let over = call.over.clone();
                    backend.deny_cache.remember(limiter.identity(key), cost, now, &outcome.decision, over, ticket);
                }
            }
        }
    }
}

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
        Ok(self.with(|inner| inner.policies.deny_cache.on = Some(on)))
    }

    /// Whether this limiter uses the deny cache (see [`Limiter::with_deny_cache`]).
    pub fn deny_cache(&self) -> bool {
        self.deny_cache_of().is_some()
    }

    /// This limiter's `key` as the deny cache names it: with its configuration (spec and key
    /// layout), so that limiters of one name with other specs or layouts, which decide on
    /// their own, never answer for each other.
    fn identity<'a>(&'a self, key: &'a str) -> Identity<'a> {
        let config = *self.inner.policies.deny_cache.fingerprint.get_or_init(|| {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            format!("{:?}", self.inner.algorithm).hash(&mut hasher);
            self.inner.colocate.hash(&mut hasher);
            hasher.finish()
        });
        Identity { kind: self.kind(), name: &self.inner.name, key, config }
    }

    /// The backend whose deny cache this limiter uses, if it uses one.
    #[inline]
    fn deny_cache_of(&self) -> Option<&Arc<RedisBackend>> {
        let Target::Redis { backend, .. } = &self.inner.target else { return None };
        if matches!(self.inner.algorithm, Algorithm::Concurrent(_) | Algorithm::Leased(_)) {
            return None;
        }
        self.inner.policies.deny_cache.on.unwrap_or(backend.deny_cache.default_on).then_some(backend)
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
