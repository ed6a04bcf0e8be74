//! Leases of concurrent limiters (release, extend, metrics) and charge corrections of the GCRA
//! family (`points_used`).

use super::{Limiter, Target};
use crate::decision::{Decision, Lease};
use crate::engine::{Algorithm, Op, Outcome};
use crate::error::{Error, Result};
use crate::metrics::{Counter, Metrics};
use crate::params::{validate_cost, validate_key};
use crate::runtime::block_on;

impl Limiter {
    /// Frees a lease granted by a concurrent limiter. Fails with [`Error::LeaseLost`] when the
    /// lease had been reclaimed (it outlived `lock_timeout`) or the limiter was reset.
    pub async fn release(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, op)) => {
                let result = self.run(key, op).await;
                self.released(lease, result)
            }
            None => Ok(()),
        }
    }

    /// Blocking form of [`Limiter::release`].
    pub fn release_blocking(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, op)) => {
                let result = self.run_blocking(key, op);
                self.released(lease, result)
            }
            None => Ok(()),
        }
    }

    /// Records a release: the hold time, and an overage when the lease outlived lock_timeout.
    fn released(&self, lease: &Lease, result: Result<Outcome>) -> Result<()> {
        let Algorithm::Concurrent(_) = &self.inner.algorithm else { return result.map(|_| ()) };
        let m = &self.inner.metrics;
        // Given back whatever the answer: a lease lost to a reclaim or a reset is not held
        // either, and one whose release failed expires on its own.
        m.add(Counter::Released, 1);
        match result {
            Ok(outcome) => {
                let held = outcome.decision.decided_at_micros.saturating_sub(lease.granted_at_micros);
                m.add(Counter::HeldMicros, held);
                if outcome.lease_overdue {
                    m.add(Counter::Overages, 1);
                }
                Ok(())
            }
            Err(e) => {
                if let Error::LeaseLost { .. } = e {
                    m.add(Counter::Overages, 1);
                }
                Err(e)
            }
        }
    }

    /// Renews a concurrent lease for another `lock_timeout` from now, so a long block keeps its
    /// slot. Fails with [`Error::LeaseLost`] if the lease was already reclaimed.
    pub async fn extend(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, _)) => self.run(key, Op::Extend { lease_id: lease.id }).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Blocking form of [`Limiter::extend`].
    pub fn extend_blocking(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, _)) => self.run_blocking(key, Op::Extend { lease_id: lease.id }).map(|_| ()),
            None => Ok(()),
        }
    }

    /// This process's metrics for this limiter: its checks by outcome (and their latency on
    /// Redis); concurrent limiters add their leases.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics.snapshot()
    }

    /// The metrics of every process sharing this limiter: on Redis, this process's pending
    /// counts are flushed first and the aggregate read back; on memory, the same as
    /// [`Limiter::metrics`].
    pub async fn fleet_metrics(&self) -> Result<Metrics> {
        match &self.inner.target {
            Target::Redis { backend, .. } => {
                backend.fleet_metrics(self.kind(), &self.inner.name, &self.inner.metrics).await
            }
            _ => Ok(self.metrics()),
        }
    }

    /// Blocking form of [`Limiter::fleet_metrics`].
    pub fn fleet_metrics_blocking(&self) -> Result<Metrics> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.fleet_metrics()),
            _ => Ok(self.metrics()),
        }
    }

    /// The operation releasing `lease`, or `None` when there is nothing to release or extend (unlimited
    /// limiters, and leases granted while failing open, whose fencing token is 0).
    fn release_op<'k>(&self, key: Option<&'k str>, lease: &Lease) -> Result<Option<(&'k str, Op)>> {
        let key = validate_key(key)?;
        match self.inner.algorithm {
            Algorithm::Concurrent(_) if lease.fencing_token == 0 => Ok(None),
            Algorithm::Concurrent(_) => Ok(Some((key, Op::Release { lease_id: lease.id }))),
            Algorithm::Unlimited(_) => Ok(None),
            _ => Err(Error::invalid("lease", "only concurrent limiters grant leases")),
        }
    }

    /// Corrects a charge of `estimate` to `actual` for the GCRA family (points, token bucket,
    /// leaky): the difference is charged or refunded. Returns the state after the correction.
    /// `actual` may exceed the capacity: the excess is debt the bucket waits out, at most
    /// [`crate::MAX_AHEAD_CAPACITIES`] capacities ahead of now (never more than 100 years);
    /// a refund never fills the bucket beyond full. Each call applies its own difference: to
    /// report a block's cost once, use [`Permit::points_used`](crate::Permit::points_used).
    pub async fn points_used(&self, key: Option<&str>, estimate: u64, actual: u64) -> Result<Decision> {
        match self.adjust_op(key, estimate, actual)? {
            Some((key, op)) => Ok(self.run(key, op).await?.decision),
            None => Ok(Decision::unlimited()),
        }
    }

    /// Blocking form of [`Limiter::points_used`].
    pub fn points_used_blocking(&self, key: Option<&str>, estimate: u64, actual: u64) -> Result<Decision> {
        match self.adjust_op(key, estimate, actual)? {
            Some((key, op)) => Ok(self.run_blocking(key, op)?.decision),
            None => Ok(Decision::unlimited()),
        }
    }

    /// The operation correcting `estimate` to `actual`, or `None` for unlimited limiters.
    fn adjust_op<'k>(&self, key: Option<&'k str>, estimate: u64, actual: u64) -> Result<Option<(&'k str, Op)>> {
        let key = validate_key(key)?;
        validate_cost("estimate", estimate)?;
        validate_cost("actual", actual)?;
        match &self.inner.algorithm {
            Algorithm::Gcra(g) => {
                // The estimate is what a call was charged, so it fits the capacity. The actual
                // cost is what the block used, whatever it was: beyond capacity it is charged as
                // debt (up to `gcra::MAX_AHEAD_CAPACITIES` capacities ahead), not refused after
                // the fact.
                if estimate > g.capacity {
                    return Err(Error::invalid(
                        "estimate",
                        format!("{estimate} exceeds the capacity of {}", g.capacity),
                    ));
                }
                Ok(Some((key, Op::Adjust { estimate, actual })))
            }
            Algorithm::Unlimited(_) => Ok(None),
            _ => Err(Error::invalid("actual", "points_used applies to points, token bucket and leaky limiters")),
        }
    }
}
