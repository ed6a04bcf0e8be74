//! The fast path of a check: a token bucket, leaky bucket or points limiter on the memory
//! backend, with nothing unusual about the limiter or the key, decided without the general
//! path's `Outcome` (see the benchmarks page: moving a whole decision through the general path
//! cost more than the limiter's arithmetic).
//!
//! **For policies.** The fast path runs no policy's hooks: it asks the policies
//! ([`super::pipeline::Policies::leave_fast_path`]) whether they have anything to do to a
//! check of the limiter, and takes the general path when any has. By itself it checks that the
//! limiter is a GCRA limiter on the memory backend, that its name has no live override, that
//! the key holds GCRA state or none (a new key is inserted there too) and that no hold is in
//! effect (the backend's own counts); anything else takes the general path, which decides
//! exactly as before.

use std::time::Duration;

use super::{Limiter, Target};
use crate::decision::{Decision, SettleTicket};
use crate::engine::Algorithm;
use crate::padded::KeyBytes;
use crate::SettleKey;

impl Limiter {
    /// Whether nothing about the limiter sends its checks down the general path: no policy
    /// has anything to do to them, and its name has no live override. Shared by every fast
    /// path (memory, leased).
    #[inline(always)]
    pub(super) fn nothing_unusual(&self) -> bool {
        let inner = &*self.inner;
        inner.policies.leave_fast_path() && !inner.live.as_ref().is_some_and(|live| live.has_overrides())
    }

    /// The fast path's decision of a check of `cost` on `key` (both validated), or `None` when
    /// the check must take the general path; timed when the limiter is observed (see
    /// `observe.rs`). For a caller that is not the hottest: [`Limiter::check_blocking`] asks
    /// [`Limiter::fast_path_observed`] first and calls the untimed path alone.
    #[inline(always)]
    pub(crate) fn fast_check(&self, key: &str, cost: u64) -> Option<Decision> {
        if self.fast_path_observed() {
            return self.fast_check_timed(key, cost);
        }
        self.fast_check_untimed(key, cost)
    }

    /// Whether the fast path's checks are timed (an instrumentation observes the limiter).
    ///
    /// A caller that returns the fast path's decision should branch on this before it calls
    /// the path, so that the untimed path is the one source of its decision: two sources (the
    /// timed and the untimed path) make the compiler build the decision in a temporary and
    /// `memcpy` it out (176 bytes), whose stores the caller's reads cannot forward. A one-key
    /// `check_blocking` ran at 0.7 of its speed so (bench-memory `--one-key`, 30M against 43M
    /// checks/s).
    #[inline(always)]
    pub(crate) fn fast_path_observed(&self) -> bool {
        self.inner.observe.on()
    }

    /// [`Limiter::fast_check`] timed for an instrumentation (see `observe.rs`): out of line, so
    /// the unobserved path stays as it was.
    #[cold]
    #[inline(never)]
    pub(crate) fn fast_check_timed(&self, key: &str, cost: u64) -> Option<Decision> {
        self.fast_check_as::<true>(key, cost)
    }

    /// The fast path itself, untimed (see [`Limiter::fast_check`]).
    #[inline(always)]
    pub(crate) fn fast_check_untimed(&self, key: &str, cost: u64) -> Option<Decision> {
        self.fast_check_as::<false>(key, cost)
    }

    /// The fast path, `TIMED` or not: one body, so that a timed check counts its decision and
    /// its duration in one visit to the thread's stripe (a thread-local lookup, which a shared
    /// library such as the Python extension pays as a call), and its decision is built where
    /// the caller returns it.
    #[inline(always)]
    pub(crate) fn fast_check_as<const TIMED: bool>(&self, key: &str, cost: u64) -> Option<Decision> {
        let started = if TIMED { crate::observe::ticks() } else { 0 };
        let inner = &*self.inner;
        let (Target::Memory { backend, namespace }, Algorithm::Gcra(gcra)) = (&inner.target, &inner.algorithm) else {
            return None;
        };
        if !self.nothing_unusual() {
            return None;
        }
        let bytes = KeyBytes::new(key.as_bytes());
        let (figures, now) = backend.check_gcra(*namespace, &bytes, gcra, cost)?;
        if TIMED {
            inner.metrics.add_decided_timed(figures.allowed, crate::observe::nanos_since(started));
        } else {
            inner.metrics.add_decided(figures.allowed);
        }
        // Built field by field in the caller's return slot, once per kind of settle ticket: a
        // ticket chosen by a branch and put in once was merged on the stack in pieces and read
        // back whole, which the CPU cannot forward from its store buffer (the largest single
        // cost of a one-key check in a profile).
        let decision = |settle: Option<SettleTicket>| Decision {
            allowed: figures.allowed,
            limit: gcra.capacity,
            remaining: figures.remaining,
            retry_after: if figures.allowed { Duration::ZERO } else { Duration::from_micros(figures.retry_us) },
            reset_after: Duration::from_micros(figures.reset_us),
            lease: None,
            decided_at_micros: now,
            limits: None,
            settle,
            shadow_refused: false,
        };
        let limiter = inner.settle_identity;
        if !figures.allowed || limiter == 0 {
            return Some(decision(None));
        }
        let id = self.next_settle_id();
        let ticket = |key: SettleKey| SettleTicket { key, cost, charged_at_micros: now, id, limiter };
        Some(match bytes {
            KeyBytes::Short(short) => decision(Some(ticket(SettleKey::of_short(short)))),
            KeyBytes::Long(_) => decision(Some(ticket(key.into()))),
        })
    }
}
