//! Shadow mode: a limiter (or one key, through a live override) decides every call as usual and
//! counts it, but admits the calls it would refuse, marking them `shadow_refused`. A would-be
//! refusal consumes nothing, exactly as an enforced refusal, so the state a shadow limiter
//! builds is the state enforcement would have built: switching shadow off enforces what shadow
//! mode reported.

use super::Limiter;
use crate::engine::{Op, Outcome};
use crate::error::Result;
use crate::live::Compiled;

impl Limiter {
    /// The same limiter (same state, same metrics) in shadow mode (`true`) or enforcing
    /// (`false`). A live override of the limiter or of a key decides instead, with the `shadow`
    /// of its own spec. In shadow mode `check` and `acquire` never refuse and never wait:
    /// a call the limit would refuse returns `allowed: true` with
    /// [`crate::Decision::shadow_refused`] set, its `remaining` and `retry_after` as enforcement
    /// would have said, and no lease (a concurrent limiter grants nothing to it, so there is
    /// nothing to release). It is counted in [`crate::Metrics::shadow_refused`].
    pub fn with_shadow(&self, shadow: bool) -> Result<Limiter> {
        let limiter = self.with(|inner| inner.shadow = shadow);
        if let Some(live) = &self.inner.live {
            live.respec(&self.inner.metrics, limiter.spec_json());
        }
        Ok(limiter)
    }

    /// Whether the limiter is in shadow mode (a live override may say otherwise for a key: see
    /// [`Limiter::with_shadow`]).
    pub fn shadow(&self) -> bool {
        self.inner.shadow
    }

    /// Whether a call decided with the override `over` (or the limiter's own spec) is shadowed.
    #[inline]
    pub(crate) fn shadow_under(&self, over: Option<&Compiled>) -> bool {
        over.map_or(self.inner.shadow, |o| o.shadow)
    }

    /// Whether calls on `key` are shadowed now.
    #[inline]
    pub(crate) fn shadow_for(&self, key: &str) -> bool {
        match self.override_for(key) {
            Some(over) => over.shadow,
            None => self.inner.shadow,
        }
    }

    /// Counts a check in the limiter's metrics and, when `shadow`, turns a refusal of a check or
    /// a peek into an admission marked `shadow_refused` (what is consumed is unchanged: a refusal
    /// consumed nothing).
    #[inline]
    pub(crate) fn conclude(
        &self,
        op: Op,
        result: Result<Outcome>,
        started: Option<std::time::Instant>,
        shadow: bool,
    ) -> Result<Outcome> {
        self.record(op, &result, started, shadow);
        self.shadowed(op, shadow, result)
    }

    /// When `shadow`, turns a refusal of a check or a peek into an admission marked
    /// `shadow_refused` (counting is the caller's: see [`Limiter::conclude`]).
    #[inline]
    pub(crate) fn shadowed(&self, op: Op, shadow: bool, result: Result<Outcome>) -> Result<Outcome> {
        if shadow {
            return result.map(|mut outcome| {
                shadow_decision(op, &mut outcome);
                outcome
            });
        }
        result
    }
}

/// Marks a refused check or peek as admitted in shadow mode.
#[inline]
fn shadow_decision(op: Op, outcome: &mut Outcome) {
    let d = &mut outcome.decision;
    if !d.allowed && matches!(op, Op::Check { .. } | Op::Peek) {
        d.allowed = true;
        d.shadow_refused = true;
        d.lease = None;
        // Nothing is waiting on a call that returns at once.
        outcome.wake = None;
    }
}
