//! Calls that may wait: `acquire` (sleeping exactly until the decision can change, or until a
//! release wakes it) and `within_limit`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Limiter, Target};
use crate::decision::Decision;
use crate::engine::{Op, Waiter};
use crate::error::{Error, Result};
use crate::metrics::Counter;
use crate::observe::Call;
use crate::params::{micros, validate_duration};
use crate::runtime::block_on;

/// What `within_limit` does when the limit cannot be had within the wait timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Policy {
    /// Return [`Error::OverLimit`] (the default).
    #[default]
    Raise,
    /// Skip the block and return `Ok(None)`.
    Ignore,
}

/// What `within_limit` hands the block: the decision, and for points limiters the means to
/// report the actual cost.
#[derive(Debug)]
pub struct Permit {
    limiter: Limiter,
    key: Option<String>,
    estimate: u64,
    decision: Decision,
    /// Set by the first `points_used`: a block's cost is reported once.
    reported: AtomicBool,
}

impl Permit {
    /// The decision that admitted the block.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Reports the actual cost of the block; the difference from the estimate is charged (beyond
    /// capacity as bounded debt, see [`Limiter::points_used`]) or refunded. Only for the GCRA
    /// family (points, token bucket, leaky). A permit's cost is reported once: a second report
    /// fails with [`crate::Error::InvalidArgument`] naming `actual` and changes nothing (so a
    /// retried report never refunds or charges twice).
    ///
    /// A report refused as invalid (nothing was written) may be made again; one that failed
    /// otherwise (the backend's answer was lost: it may have been applied) may not.
    pub async fn points_used(&self, actual: u64) -> Result<Decision> {
        self.claim_report()?;
        let result = self.limiter.points_used(self.key.as_deref(), self.estimate, actual).await;
        self.settle_report(result)
    }

    /// Blocking form of [`Permit::points_used`].
    pub fn points_used_blocking(&self, actual: u64) -> Result<Decision> {
        self.claim_report()?;
        let result = self.limiter.points_used_blocking(self.key.as_deref(), self.estimate, actual);
        self.settle_report(result)
    }

    /// Marks the permit's cost as reported, or fails if it already was.
    fn claim_report(&self) -> Result<()> {
        if self.reported.swap(true, Ordering::AcqRel) {
            return Err(Error::invalid("actual", "points_used was already reported for this permit"));
        }
        Ok(())
    }

    /// Gives the report back when it was refused before anything was written.
    fn settle_report(&self, result: Result<Decision>) -> Result<Decision> {
        if let Err(Error::InvalidArgument { .. }) = &result {
            self.reported.store(false, Ordering::Release);
        }
        result
    }
}

impl Limiter {
    /// Consumes `cost`, waiting up to `wait_timeout` (default: the limiter's) for the limit to
    /// allow it. Waits sleep exactly until the decision can change (or, for a concurrent limiter,
    /// until a slot is released); when the wait cannot succeed in time, fails at once with
    /// [`Error::OverLimit`] carrying the exact `retry_after`.
    pub async fn acquire(&self, key: Option<&str>, cost: u64, wait_timeout: Option<Duration>) -> Result<Decision> {
        let started = self.inner.observe.start();
        let result = self.acquire_untimed(key, cost, wait_timeout).await;
        self.observe_wait(&result, started);
        result
    }

    /// Adds a waiting call's duration to the limiter's timings (see `observe.rs`): admitted,
    /// refused (over the limit within the wait) or error (bad input is no call).
    fn observe_wait(&self, result: &Result<Decision>, started: Option<std::time::Instant>) {
        let counter = match result {
            Ok(_) => Counter::Allowed,
            Err(Error::OverLimit { .. }) => Counter::Refused,
            Err(Error::BackendUnavailable { .. } | Error::Timeout { .. } | Error::BackendRejected { .. }) => {
                Counter::Errors
            }
            Err(_) => return,
        };
        self.time(Call::Wait, counter, started);
    }

    /// [`Limiter::acquire`] without its timing.
    async fn acquire_untimed(&self, key: Option<&str>, cost: u64, wait_timeout: Option<Duration>) -> Result<Decision> {
        let wait = match wait_timeout {
            Some(w) if !w.is_zero() => validate_duration("wait_timeout", w)?,
            Some(w) => w,
            None => self.inner.wait_timeout,
        };
        let (key, _) = self.check_op(key, cost)?;
        let clock = self.clock();
        let started = clock.now_micros();
        let deadline = started.saturating_add(micros(wait));
        let mut attempts = 0;
        let mut waiter_id = None;
        // A call that never refuses never waits, so it is never counted among the waiters.
        let may_wait = deadline > started && !self.never_refuses(key);
        loop {
            let (_, mut op) = self.check_op(Some(key), cost)?;
            // A concurrent limiter counts this caller among the key's waiters while it waits
            // (operators see them); the id of its first lease names it over every attempt.
            if let Op::Check { lease_id, waiter, .. } = &mut op {
                if *lease_id != 0 && may_wait {
                    let id = *waiter_id.get_or_insert(*lease_id);
                    *waiter = Some(Waiter { id, wait_us: deadline.saturating_sub(clock.now_micros()) });
                }
            }
            let outcome = self.run(key, op).await?;
            attempts += 1;
            if outcome.decision.allowed {
                let waited = (attempts > 1).then(|| Duration::from_micros(clock.now_micros().saturating_sub(started)));
                return Ok(self.ticketed_granted(outcome, waited, key, cost));
            }
            self.inner.metrics.add(Counter::Reclaimed, outcome.reclaimed);
            let retry_after = outcome.decision.retry_after;
            let now = clock.now_micros();
            let ready_at = now.saturating_add(micros(retry_after));
            match outcome.wake {
                // A release may free a slot long before `retry_after` (which is when an overdue
                // holder could be reclaimed): wait for either, up to the deadline.
                Some(wake) if now < deadline => {
                    wake.wait(&*clock, Duration::from_micros(ready_at.min(deadline) - now)).await;
                }
                // Nothing but time changes these decisions: if waiting cannot succeed within
                // the deadline, say so at once instead of sleeping in vain.
                None if ready_at <= deadline => clock.sleep(retry_after.max(Duration::from_micros(1))).await,
                _ => return Err(Error::OverLimit { retry_after }),
            }
        }
    }

    /// Blocking form of [`Limiter::acquire`]. Call it from plain threads, not from inside an
    /// async task.
    pub fn acquire_blocking(&self, key: Option<&str>, cost: u64, wait_timeout: Option<Duration>) -> Result<Decision> {
        let started = self.inner.observe.start();
        let result = self.acquire_blocking_untimed(key, cost, wait_timeout);
        self.observe_wait(&result, started);
        result
    }

    fn acquire_blocking_untimed(
        &self,
        key: Option<&str>,
        cost: u64,
        wait_timeout: Option<Duration>,
    ) -> Result<Decision> {
        if let Target::Redis { .. } | Target::Partitions(_) = self.inner.target {
            // A leased limiter spends from its lease without the runtime when it can.
            if let (Some(pool), Ok((key_ok, Op::Check { cost, .. }))) = (&self.inner.pool, self.check_op(key, cost)) {
                if let Some(decision) = self.leased_spend(pool, key_ok, cost) {
                    return Ok(decision);
                }
            }
            return block_on(self.acquire_untimed(key, cost, wait_timeout));
        }
        // In-process fast path: a call that need not wait involves no runtime.
        let (key_ok, op) = self.check_op(key, cost)?;
        let outcome = self.run_local(key_ok, op)?;
        if outcome.decision.allowed {
            return Ok(self.ticketed_granted(outcome, None, key_ok, cost));
        }
        self.inner.metrics.add(Counter::Reclaimed, outcome.reclaimed);
        block_on(self.acquire_untimed(key, cost, wait_timeout))
    }

    /// Acquires (waiting up to the wait timeout), runs `block`, then releases any lease.
    /// With [`Policy::Ignore`] an over-limit skips the block and returns `Ok(None)`.
    pub async fn within_limit<T, F, Fut>(
        &self,
        key: Option<&str>,
        cost: u64,
        policy: Policy,
        block: F,
    ) -> Result<Option<T>>
    where
        F: FnOnce(Permit) -> Fut,
        Fut: Future<Output = T>,
    {
        let decision = match self.acquire(key, cost, None).await {
            Ok(decision) => decision,
            Err(e) if e.is_over_limit() && policy == Policy::Ignore => return Ok(None),
            Err(e) => return Err(e),
        };
        let lease = decision.lease;
        let output = block(self.permit(key, cost, decision)).await;
        if let Some(lease) = lease {
            self.release(key, &lease).await?;
        }
        Ok(Some(output))
    }

    /// Blocking form of [`Limiter::within_limit`].
    pub fn within_limit_blocking<T>(
        &self,
        key: Option<&str>,
        cost: u64,
        policy: Policy,
        block: impl FnOnce(&Permit) -> T,
    ) -> Result<Option<T>> {
        let decision = match self.acquire_blocking(key, cost, None) {
            Ok(decision) => decision,
            Err(e) if e.is_over_limit() && policy == Policy::Ignore => return Ok(None),
            Err(e) => return Err(e),
        };
        let lease = decision.lease;
        let output = block(&self.permit(key, cost, decision));
        if let Some(lease) = lease {
            self.release_blocking(key, &lease)?;
        }
        Ok(Some(output))
    }

    fn permit(&self, key: Option<&str>, estimate: u64, decision: Decision) -> Permit {
        Permit {
            limiter: self.clone(),
            key: key.map(str::to_owned),
            estimate,
            decision,
            reported: AtomicBool::new(false),
        }
    }
}
