//! Holds on the limiter's side: writing and ending a hold of either role (a pause, `pause.rs`;
//! a block, `block.rs`) on the limiter's backend. One mechanism (see `engine/hold.rs`): the two
//! roles' calls differ only in the role they pass, so the dispatch to the backend is written
//! here once.

use std::time::Duration;

use super::{Limiter, Target};
use crate::engine::hold::{Hold, HoldMode};
use crate::error::Result;

impl Limiter {
    /// Holds `key` (validated) in `role` for `duration` (validated; see [`HoldMode`] for
    /// `mode`) on the limiter's backend, in every process that shares it; returns the hold in
    /// effect (zero on a target that holds nothing: unlimited, leased partitions).
    pub(crate) async fn hold_on_backend(
        &self,
        key: &str,
        role: Hold,
        duration: Duration,
        mode: HoldMode,
    ) -> Result<Duration> {
        match &self.inner.target {
            Target::Redis { backend, failover } => {
                backend.hold(self.kind(), &self.inner.name, key, failover, role, duration, mode).await
            }
            _ => Ok(self.hold_in_process(key, role, duration, mode)),
        }
    }

    /// [`Limiter::hold_on_backend`] on an in-process target.
    pub(crate) fn hold_in_process(&self, key: &str, role: Hold, duration: Duration, mode: HoldMode) -> Duration {
        match &self.inner.target {
            Target::Memory { backend, namespace } => backend.hold(*namespace, key, role, duration, mode),
            _ => Duration::ZERO,
        }
    }

    /// Ends the hold in `role` of `key` (validated) before its time, in every process that
    /// shares the backend; returns whether one was in effect. The key is let back in: this
    /// process forgets its remembered refusals of it at once (the deny cache's, a lease's), the
    /// other processes at their next live poll (see `backend/redis/cleared.rs`).
    pub(crate) async fn end_hold(&self, key: &str, role: Hold) -> Result<bool> {
        self.forget_refusal(key);
        self.forget_leased_refusal(key);
        match &self.inner.target {
            Target::Redis { backend, failover } => {
                backend.release(self.kind(), &self.inner.name, key, failover, role).await
            }
            _ => Ok(self.end_hold_in_process(key, role)),
        }
    }

    /// [`Limiter::end_hold`] on an in-process target (which remembers no refusal).
    pub(crate) fn end_hold_in_process(&self, key: &str, role: Hold) -> bool {
        match &self.inner.target {
            Target::Memory { backend, namespace } => backend.release(*namespace, key, role),
            _ => false,
        }
    }
}
