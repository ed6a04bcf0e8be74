//! Shadow mode: a limiter (or one key, through a live override) decides every call as usual and
//! counts it, but admits the calls it would refuse, marking them `shadow_refused`. A would-be
//! refusal consumes nothing, exactly as an enforced refusal, so the state a shadow limiter
//! builds is the state enforcement would have built: switching shadow off enforces what shadow
//! mode reported.

use std::time::Duration;

use super::pipeline::{Call, Policy};
use super::Limiter;
use crate::engine::{LimiterConfig, Op, Outcome};
use crate::error::Result;
use crate::live::Compiled;

/// Shadow mode on a limiter: whether its own spec is in shadow mode (a live override's spec
/// says for the calls it decides).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Shadow(pub(crate) bool);

impl Policy for Shadow {
    type State = ();

    /// In shadow mode a refusal becomes an admission, which the fast path does not know.
    fn leaves_fast_path(&self) -> bool {
        !self.0
    }

    fn describe(&self, config: &mut LimiterConfig) {
        config.shadow = self.0;
    }

    #[inline(always)]
    fn before(&self, _: &Limiter, _: &str, _: &Call) -> std::result::Result<(), Outcome> {
        Ok(())
    }

    /// The shadow rule, the one place it is written: when the call's spec is in shadow mode, a
    /// refusal of a check or a peek becomes an admission marked `shadow_refused` (what is
    /// consumed is unchanged: a refusal consumed nothing).
    #[inline]
    fn after(&self, _: &Limiter, _: &str, call: &Call, _: (), _: Option<Duration>, result: &mut Result<Outcome>) {
        if let (Ok(outcome), false) = (result, call.enforced) {
            shadow_decision(call.op, outcome);
        }
    }
}

impl Limiter {
    /// The same limiter (same state, same metrics) in shadow mode (`true`) or enforcing
    /// (`false`). A live override of the limiter or of a key decides instead, with the `shadow`
    /// of its own spec. In shadow mode `check` and `acquire` never refuse and never wait:
    /// a call the limit would refuse returns `allowed: true` with
    /// [`crate::Decision::shadow_refused`] set, its `remaining` and `retry_after` as enforcement
    /// would have said, and no lease (a concurrent limiter grants nothing to it, so there is
    /// nothing to release). It is counted in [`crate::Metrics::shadow_refused`].
    pub fn with_shadow(&self, shadow: bool) -> Result<Limiter> {
        let limiter = self.with(|inner| inner.policies.shadow = Shadow(shadow));
        if let Some(live) = &self.inner.live {
            live.respec(&self.inner.metrics, limiter.spec_json());
        }
        Ok(limiter)
    }

    /// Whether the limiter is in shadow mode (a live override may say otherwise for a key: see
    /// [`Limiter::with_shadow`]).
    pub fn shadow(&self) -> bool {
        self.inner.policies.shadow.0
    }

    /// Whether a call decided with the override `over` (or the limiter's own spec) is shadowed.
    #[inline]
    pub(crate) fn shadow_under(&self, over: Option<&Compiled>) -> bool {
        over.map_or(self.inner.policies.shadow.0, |o| o.config.shadow)
    }

    /// Whether calls on `key` never refuse now (shadow mode): such a call never waits, and takes
    /// no part in an atomic step of several limits (`check_all.rs`).
    #[inline]
    pub(crate) fn never_refuses(&self, key: &str) -> bool {
        self.shadow_under(self.override_for(key).as_deref())
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
