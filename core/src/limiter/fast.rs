//! The fast path of a check: a token bucket, leaky bucket or points limiter on the memory
//! backend, with nothing unusual about the limiter or the key, decided without the general
//! path's `Outcome` (see the benchmarks page: moving a whole decision through the general path
//! cost more than the limiter's arithmetic).
//!
//! **For policies on the check path.** A policy that must see every check of a limiter (a
//! shadow limit, a block list, a deny cache, …) calls [`SlowPath::require`] with a reason of
//! its own when it is configured on the limiter, and [`SlowPath::release`] when it no longer
//! applies; while any reason is set, every check takes the general path. What the fast path
//! checks by itself: the limiter is a GCRA limiter on the memory backend that does not block
//! keys after a refusal and is not in shadow mode, the name has no live override, the key holds GCRA state or none (a new key is inserted there too) and no pause or
//! block is in effect (the backend's own counts);
//! anything else takes the general path, which decides exactly as before.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Limiter, Target};
use crate::decision::{Decision, SettleTicket};
use crate::engine::Algorithm;
use crate::padded::KeyBytes;
use crate::SettleKey;

/// The reasons a limiter's checks must take the general path: one bit each, shared by the
/// copies of a limiter (`with_wait_timeout`, …). Clear: the fast path may answer.
#[derive(Debug, Default)]
pub(crate) struct SlowPath(AtomicU32);

impl SlowPath {
    /// Sets `reason` (one bit, a policy's own constant): checks take the general path until it
    /// is released.
    #[allow(dead_code)] // the hook for the policies on the check path
    pub(crate) fn require(&self, reason: u32) {
        self.0.fetch_or(reason, Ordering::Release);
    }

    /// Clears `reason`.
    #[allow(dead_code)]
    pub(crate) fn release(&self, reason: u32) {
        self.0.fetch_and(!reason, Ordering::Release);
    }

    /// Whether no reason is set.
    #[inline(always)]
    pub(crate) fn is_clear(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

impl Limiter {
    /// Whether nothing about the limiter sends its checks down the general path: no policy's
    /// reason, no shadow mode, no `block_for`, no live override of its name. A limiter that
    /// blocks keys after a refusal starts its blocks on the general path, and one in shadow mode
    /// turns refusals into admissions there. Shared by every fast path (memory, leased).
    #[inline(always)]
    pub(super) fn nothing_unusual(&self) -> bool {
        let inner = &*self.inner;
        inner.slow_path.is_clear()
            && !inner.shadow
            && inner.block_for.is_none()
            && !inner.live.as_ref().is_some_and(|live| live.has_overrides())
    }

    /// The fast path's decision of a check of `cost` on `key` (both validated), or `None` when
    /// the check must take the general path. Unobserved, timing costs this one branch.
    #[inline(always)]
    pub(crate) fn fast_check(&self, key: &str, cost: u64) -> Option<Decision> {
        if self.inner.observe.on() {
            return self.fast_check_timed(key, cost);
        }
        self.fast_check_untimed(key, cost)
    }

    /// [`Limiter::fast_check`] timed for an instrumentation (see `observe.rs`): out of line, so
    /// the unobserved path stays as it was.
    #[cold]
    #[inline(never)]
    fn fast_check_timed(&self, key: &str, cost: u64) -> Option<Decision> {
        let started = crate::observe::ticks();
        let decision = self.fast_check_untimed(key, cost)?;
        self.inner.metrics.timings.add_fast(decision.allowed, crate::observe::nanos_since(started));
        Some(decision)
    }

    #[inline(always)]
    fn fast_check_untimed(&self, key: &str, cost: u64) -> Option<Decision> {
        let inner = &*self.inner;
        let (Target::Memory { backend, namespace }, Algorithm::Gcra(gcra)) = (&inner.target, &inner.algorithm) else {
            return None;
        };
        if !self.nothing_unusual() {
            return None;
        }
        let bytes = KeyBytes::new(key.as_bytes());
        let (figures, now) = backend.check_gcra(*namespace, &bytes, gcra, cost)?;
        inner.metrics.add_decided(figures.allowed);
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
