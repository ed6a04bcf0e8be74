//! Calls that may wait: `acquire` (sleeping exactly until the decision can change, or until a
//! release wakes it) and `within_limit`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Limiter, Target};
use crate::decision::Decision;
use crate::engine::{Algorithm, Op, Outcome, Waiter};
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
        let mut wait = self.start_waiting(key, cost, wait_timeout)?;
        self.wait_for_grant(&mut wait, None).await
    }

    /// Attempts until granted or until waiting cannot succeed in time; `refused` is an attempt
    /// already made and refused, waited on before the next.
    async fn wait_for_grant(&self, wait: &mut Wait<'_>, mut refused: Option<Outcome>) -> Result<Decision> {
        loop {
            if let Some(outcome) = refused.take() {
                self.sleep_for_next_attempt(wait, outcome).await;
            }
            let op = self.attempt_op(wait)?;
            let outcome = self.run(wait.key, op).await?;
            match self.answer_of(wait, &outcome) {
                Some(done) => return done.map(|()| self.granted_after(wait, outcome)),
                None => refused = Some(outcome),
            }
        }
    }

    /// Validates an acquire's arguments and starts its clock (see [`Wait`]).
    fn start_waiting<'k>(&self, key: Option<&'k str>, cost: u64, wait_timeout: Option<Duration>) -> Result<Wait<'k>> {
        let wait = match wait_timeout {
            Some(w) if !w.is_zero() => validate_duration("wait_timeout", w)?,
            Some(w) => w,
            None => self.inner.wait_timeout,
        };
        let key = self.validate_check(key, cost)?;
        let started = self.clock().now_micros();
        let deadline = started.saturating_add(micros(wait));
        // Only a concurrent limiter counts its waiters (see `attempt_op`); a call that never
        // refuses never waits, so it is never counted among them. Asked only then: the live
        // override lookup is not free, and an in-process acquire that is admitted at once
        // should cost what a check does.
        let may_wait =
            matches!(self.inner.algorithm, Algorithm::Concurrent(_)) && deadline > started && !self.never_refuses(key);
        Ok(Wait { key, cost, started, deadline, may_wait, attempts: 0, waiter_id: None })
    }

    /// The check of an acquire's next attempt.
    fn attempt_op(&self, wait: &mut Wait<'_>) -> Result<Op> {
        let (_, mut op) = self.check_op(Some(wait.key), wait.cost)?;
        // A concurrent limiter counts this caller among the key's waiters while it waits
        // (operators see them); the id of its first lease names it over every attempt.
        if let Op::Check { lease_id, waiter, .. } = &mut op {
            if *lease_id != 0 && wait.may_wait {
                let id = *wait.waiter_id.get_or_insert(*lease_id);
                let wait_us = wait.deadline.saturating_sub(self.clock().now_micros());
                *waiter = Some(Waiter { id, wait_us });
            }
        }
        Ok(op)
    }

    /// Waits after a refused attempt that [`Limiter::answer_of`] let wait: until a release or
    /// until the decision can change, within the deadline.
    async fn sleep_for_next_attempt(&self, wait: &Wait<'_>, refused: Outcome) {
        let clock = self.clock();
        let retry_after = refused.decision.retry_after;
        let now = clock.now_micros();
        let ready_at = now.saturating_add(micros(retry_after));
        match refused.wake {
            // A release may free a slot long before `retry_after` (which is when an overdue
            // holder could be reclaimed): wait for either, up to the deadline (past it, the next
            // attempt is the last).
            Some(wake) => {
                if now < wait.deadline {
                    wake.wait(&*clock, Duration::from_micros(ready_at.min(wait.deadline) - now)).await;
                }
            }
            // Nothing but time changes these decisions.
            None => clock.sleep(retry_after.max(Duration::from_micros(1))).await,
        }
    }

    /// Whether an attempt ends the acquire: `Ok(())` when granted, [`Error::OverLimit`] when
    /// waiting cannot succeed within the deadline (said at once instead of sleeping in vain),
    /// `None` when it must wait. Counts a refused attempt's reclaimed leases.
    fn answer_of(&self, wait: &mut Wait<'_>, outcome: &Outcome) -> Option<Result<()>> {
        wait.attempts += 1;
        if outcome.decision.allowed {
            return Some(Ok(()));
        }
        self.inner.metrics.add(Counter::Reclaimed, outcome.reclaimed);
        let retry_after = outcome.decision.retry_after;
        let now = self.clock().now_micros();
        // A concurrent limiter's release can come any time before the deadline; nothing but
        // time changes the other decisions.
        let may_succeed = match outcome.wake {
            Some(_) => now < wait.deadline,
            None => now.saturating_add(micros(retry_after)) <= wait.deadline,
        };
        if may_succeed {
            return None;
        }
        Some(Err(Error::OverLimit { retry_after }))
    }

    /// The decision of a granted attempt, with how long the acquire waited for it.
    fn granted_after(&self, wait: &Wait<'_>, outcome: Outcome) -> Decision {
        let waited =
            (wait.attempts > 1).then(|| Duration::from_micros(self.clock().now_micros().saturating_sub(wait.started)));
        self.ticketed_granted(outcome, waited, wait.key, wait.cost)
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
        // In process, the first attempt involves no runtime, so a call that need not wait never
        // enters one; a refused one waits from that attempt on (never checking twice).
        let mut wait = self.start_waiting(key, cost, wait_timeout)?;
        let op = self.attempt_op(&mut wait)?;
        let outcome = self.run_local(wait.key, op)?;
        if let Some(done) = self.answer_of(&mut wait, &outcome) {
            return done.map(|()| self.granted_after(&wait, outcome));
        }
        block_on(self.wait_for_grant(&mut wait, Some(outcome)))
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

/// An acquire in progress: its key and cost, when it started and must end, and its attempts.
struct Wait<'k> {
    key: &'k str,
    cost: u64,
    /// When the acquire started (µs, the limiter's clock).
    started: u64,
    /// When waiting must have succeeded (µs).
    deadline: u64,
    /// Whether it is counted among a concurrent limiter's waiters: a deadline ahead, and a
    /// limiter that can refuse.
    may_wait: bool,
    attempts: u32,
    /// The id a concurrent limiter's waiter is counted under, from its first attempt's lease.
    waiter_id: Option<u128>,
}
