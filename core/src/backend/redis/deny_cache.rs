//! The deny cache: refusals a Redis backend remembers in process (rate-limiter-flexible's
//! `inMemoryBlockOnConsumed`, upstash's `ephemeralCache`), so that a key that is already refused
//! costs no round trip until its `retry_after` has passed.
//!
//! An entry is (kind, name, key, configuration) → the refused cost, the instant its refusal
//! ends, the decision it came with and the live override it was decided under. The
//! configuration is the limiter's spec and key layout (`colocate`): limiters of one name with
//! other specs, or other layouts, decide on their own and never answer for each other. A check
//! of at least that cost before that instant, under the same override, is refused from the
//! entry. Entries end at their instant (dropped when met), and the table holds at most its cap:
//! when full, ended entries go first, then an arbitrary one, so memory stays bounded under any
//! key churn.
//!
//! A reset, the early end of a hold or a settle made by this process forgets the entries of the
//! key it affects, whatever their configuration (see [`DenyCache::forget`]); a live override
//! seen by this process makes the entries decided under another one stale (compared at
//! lookup). A reset or the early end of a hold made by another process reaches this one through
//! the live poll (see [`super::cleared`]), within a poll interval.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::decision::Decision;
use crate::engine::Kind;
use crate::live::Compiled;

/// One remembered refusal.
#[derive(Debug)]
struct Entry {
    /// The smallest cost this refusal answers for: a cheaper call may fit and goes to Redis.
    cost: u64,
    /// When the refusal ends (µs, by the backend's clock).
    until: u64,
    /// The refusal as Redis decided it, at `decided`.
    decision: Decision,
    /// When it was decided (µs, by the backend's clock).
    decided: u64,
    /// The live override it was decided under (compared by identity).
    over: Option<Arc<Compiled>>,
}

/// The entries of each kind, name and key, by configuration.
type Entries = HashMap<Box<str>, Vec<(u64, Entry)>>;

/// Refusals remembered in process by one Redis backend.
#[derive(Debug)]
pub(crate) struct DenyCache {
    /// Whether limiters of the backend use it unless they say otherwise.
    pub(crate) default_on: bool,
    /// The most entries held.
    max_entries: usize,
    /// Keyed by `kind \0 name \0 key` (names contain no NUL; a key's bytes end the string),
    /// then by configuration (almost always one).
    entries: Mutex<Entries>,
    /// How many entries `entries` holds: while none, lookups skip its lock.
    held: AtomicUsize,
    /// Counts the rounds of entries forgotten for another process (see [`DenyCache::ticket`]).
    cleared: AtomicU64,
    /// The last count of the fleet's clears this process has applied (see [`super::cleared`]).
    pub(crate) feed_seen: Mutex<Option<u64>>,
}

/// Which limiter and key an entry is for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity<'a> {
    pub(crate) kind: Kind,
    pub(crate) name: &'a str,
    pub(crate) key: &'a str,
    /// The limiter's configuration: a fingerprint of its spec and key layout.
    pub(crate) config: u64,
}

/// What entries of one kind, name and key are filed under (and another process's clear names).
pub(crate) fn entry_key(Identity { kind, name, key, .. }: Identity<'_>) -> String {
    let mut k = String::with_capacity(kind.as_str().len() + name.len() + key.len() + 2);
    k.push_str(kind.as_str());
    k.push('\0');
    k.push_str(name);
    k.push('\0');
    k.push_str(key);
    k
}

fn same_override(a: &Option<Arc<Compiled>>, b: Option<&Arc<Compiled>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

impl DenyCache {
    /// A cache that limiters use by default when `default_on`, of at most `max_entries`.
    pub(crate) fn new(default_on: bool, max_entries: usize) -> Self {
        DenyCache {
            default_on,
            max_entries,
            entries: Mutex::new(HashMap::new()),
            held: AtomicUsize::new(0),
            cleared: AtomicU64::new(0),
            feed_seen: Mutex::new(None),
        }
    }

    /// Read before a call is sent, handed back to [`DenyCache::remember`]: a refusal whose call
    /// was in flight while another process's clear was applied here may predate that clear,
    /// and is not remembered.
    #[inline]
    pub(crate) fn ticket(&self) -> u64 {
        self.cleared.load(Ordering::Acquire)
    }

    /// Recounts `held` from `entries`.
    fn recount(&self, entries: &Entries) {
        self.held.store(entries.values().map(Vec::len).sum(), Ordering::Release);
    }

    /// The refusal of a check of `cost` on `who` at `now` under `over`, when
    /// an entry answers for it: its decision with the time that has passed taken off.
    #[inline]
    pub(crate) fn refused(
        &self,
        who: Identity<'_>,
        cost: u64,
        now: u64,
        over: Option<&Arc<Compiled>>,
    ) -> Option<Decision> {
        if self.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        let k = entry_key(who);
        let mut entries = self.entries.lock();
        let configs = entries.get_mut(k.as_str())?;
        let at = configs.iter().position(|(config, _)| *config == who.config)?;
        let entry = &configs[at].1;
        if entry.until <= now || !same_override(&entry.over, over) {
            configs.swap_remove(at);
            if configs.is_empty() {
                entries.remove(k.as_str());
            }
            self.held.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        if cost < entry.cost {
            return None;
        }
        let passed = std::time::Duration::from_micros(now.saturating_sub(entry.decided));
        let mut d = entry.decision.clone();
        d.retry_after = std::time::Duration::from_micros(entry.until - now);
        d.reset_after = d.reset_after.saturating_sub(passed).max(d.retry_after);
        d.decided_at_micros = d.decided_at_micros.saturating_add(passed.as_micros() as u64);
        Some(d)
    }

    /// Remembers `decision`, a refusal of a check of `cost` on `who` decided
    /// at `now` under `over`, until its `retry_after` has passed, unless another process's
    /// clear was applied since `ticket` (see [`DenyCache::ticket`]).
    pub(crate) fn remember(
        &self,
        who: Identity<'_>,
        cost: u64,
        now: u64,
        decision: &Decision,
        over: Option<Arc<Compiled>>,
        ticket: u64,
    ) {
        let retry = u64::try_from(decision.retry_after.as_micros()).unwrap_or(u64::MAX);
        if retry == 0 {
            return;
        }
        let k = entry_key(who);
        let entry = Entry { cost, until: now.saturating_add(retry), decision: decision.clone(), decided: now, over };
        let mut entries = self.entries.lock();
        if self.cleared.load(Ordering::Acquire) != ticket {
            return;
        }
        if self.held.load(Ordering::Acquire) >= self.max_entries {
            entries.retain(|_, configs| {
                configs.retain(|(_, e)| e.until > now);
                !configs.is_empty()
            });
            self.recount(&entries);
            if self.held.load(Ordering::Acquire) >= self.max_entries {
                // Full of live refusals: one goes (any: each only saves round trips).
                if let Some(victim) = entries.keys().next().cloned() {
                    entries.remove(&victim);
                }
            }
        }
        let configs = entries.entry(k.into_boxed_str()).or_default();
        match configs.iter_mut().find(|(config, _)| *config == who.config) {
            Some((_, old)) => *old = entry,
            None => configs.push((who.config, entry)),
        }
        self.recount(&entries);
    }

    /// Forgets the entries of `who`'s kind, name and key, whatever their configuration: its
    /// state changed (a reset, the early end of a hold, a settle).
    pub(crate) fn forget(&self, who: Identity<'_>) {
        if self.held.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut entries = self.entries.lock();
        entries.remove(entry_key(who).as_str());
        self.recount(&entries);
    }

    /// Forgets the entries another process's clears name (`kind \0 name \0 key`, as
    /// [`super::cleared`] carries them), or every entry (`None`: clears were missed).
    pub(crate) fn forget_for_another_process(&self, named: Option<&[String]>) {
        let mut entries = self.entries.lock();
        self.cleared.fetch_add(1, Ordering::AcqRel);
        match named {
            Some(named) => named.iter().for_each(|k| {
                entries.remove(k.as_str());
            }),
            None => entries.clear(),
        }
        self.recount(&entries);
    }

    /// Whether it holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.held.load(Ordering::Acquire) == 0
    }

    /// How many entries it holds (ended ones included until met).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: Kind, key: &str) -> Identity<'_> {
        Identity { kind, name: "n", key, config: 1 }
    }

    fn refusal(retry_us: u64) -> Decision {
        crate::engine::decision(false, 10, 0, retry_us, retry_us * 2)
    }

    #[test]
    fn an_entry_answers_checks_of_at_least_its_cost_until_it_ends() {
        let cache = DenyCache::new(true, 10);
        assert!(cache.refused(id(Kind::Bucket, "k"), 1, 0, None).is_none());
        cache.remember(id(Kind::Bucket, "k"), 3, 1_000, &refusal(500), None, 0);
        assert!(cache.refused(id(Kind::Bucket, "k"), 2, 1_100, None).is_none(), "a cheaper call may fit");
        let d = cache.refused(id(Kind::Bucket, "k"), 3, 1_100, None).unwrap();
        assert_eq!(d.retry_after.as_micros(), 400);
        assert_eq!(d.reset_after.as_micros(), 900);
        assert!(cache.refused(id(Kind::Bucket, "other"), 3, 1_100, None).is_none());
        assert!(cache.refused(id(Kind::Window, "k"), 3, 1_100, None).is_none());
        assert!(cache.refused(id(Kind::Bucket, "k"), 5, 1_500, None).is_none(), "ended at its instant");
        assert_eq!(cache.len(), 0, "an ended entry is dropped when met");
    }

    #[test]
    fn forget_and_a_new_override_end_an_entry() {
        let cache = DenyCache::new(true, 10);
        cache.remember(id(Kind::Bucket, "k"), 1, 0, &refusal(500), None, 0);
        cache.forget(id(Kind::Bucket, "k"));
        assert!(cache.refused(id(Kind::Bucket, "k"), 1, 1, None).is_none());
        cache.remember(id(Kind::Bucket, "k"), 1, 0, &refusal(500), None, 0);
        let spec = crate::engine::LimiterSpec::Unlimited;
        let over = Arc::new(Compiled::enforcing(spec));
        assert!(cache.refused(id(Kind::Bucket, "k"), 1, 1, Some(&over)).is_none(), "decided under no override");
        assert_eq!(cache.len(), 0);
    }

    /// Another configuration (spec or layout) of the same kind, name and key has entries of
    /// its own; forgetting the key forgets them all.
    #[test]
    fn configurations_keep_their_entries_apart() {
        let cache = DenyCache::new(true, 10);
        let other = Identity { config: 2, ..id(Kind::Bucket, "k") };
        cache.remember(id(Kind::Bucket, "k"), 1, 0, &refusal(500), None, 0);
        assert!(cache.refused(other, 1, 1, None).is_none(), "another configuration decides on its own");
        cache.remember(other, 1, 0, &refusal(700), None, 0);
        assert_eq!(cache.refused(other, 1, 1, None).unwrap().retry_after.as_micros(), 699);
        assert_eq!(cache.refused(id(Kind::Bucket, "k"), 1, 1, None).unwrap().retry_after.as_micros(), 499);
        assert_eq!(cache.len(), 2);
        cache.forget(id(Kind::Bucket, "k"));
        assert!(cache.is_empty());
        // A refusal sent before another process's clear was applied is not remembered.
        let ticket = cache.ticket();
        cache.forget_for_another_process(Some(&[entry_key(id(Kind::Bucket, "k"))]));
        cache.remember(id(Kind::Bucket, "k"), 1, 0, &refusal(500), None, ticket);
        assert!(cache.is_empty());
    }

    #[test]
    fn the_cap_bounds_the_entries() {
        let cache = DenyCache::new(true, 3);
        for i in 0..100u64 {
            cache.remember(id(Kind::Bucket, &format!("k{i}")), 1, i, &refusal(1_000_000), None, 0);
            assert!(cache.len() <= 3);
        }
        assert!(cache.refused(id(Kind::Bucket, "k99"), 1, 100, None).is_some(), "the newest is kept");
    }
}
