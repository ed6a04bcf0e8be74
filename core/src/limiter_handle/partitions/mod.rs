//! Calls of partitions limiters only: what a process holds, and giving it back.

mod set;

pub(crate) use set::{partition_source, PartitionSet};

use super::{Limiter, Target};
use crate::error::{Error, Result};
use crate::params::validate_key;
use crate::runtime::block_on;

/// What a process holds of a partitions limiter for one key.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PartitionsHeld {
    /// The partitions held, as (index, fencing token) in index order of the grant. A fencing
    /// token increases with every grant of any partition of the limiter and key.
    pub partitions: Vec<(u32, u64)>,
    /// The fair share the last lease call allowed this process (memory: every partition of its
    /// class).
    pub share: u32,
    /// The live members of this process's class the last lease call counted (memory: 1).
    pub members: u32,
    /// Units per second the held partitions are worth.
    pub rate: f64,
}

impl Limiter {
    /// What this process holds of a partitions limiter for `key` now. Fails with
    /// [`Error::InvalidArgument`] naming `limiter` on any other kind.
    pub fn partitions_held(&self, key: Option<&str>) -> Result<PartitionsHeld> {
        let key = validate_key(key)?;
        let Target::Partitions(set) = &self.inner.target else {
            return Err(Error::invalid("limiter", "only partitions limiters hold partitions"));
        };
        let (partitions, share, members, rate) = set.held(key);
        Ok(PartitionsHeld { partitions, share, members, rate })
    }

    /// Gives back what this process holds, for every key: every partition of a partitions
    /// limiter, so that other processes may lease them at once instead of after `lease_ttl`, and
    /// the unspent tokens of a leased token bucket's leases; a later call leases anew. Does
    /// nothing on other kinds of limiter.
    pub async fn close(&self) -> Result<()> {
        match &self.inner.target {
            Target::Partitions(set) => set.release(None).await,
            _ if self.inner.pool.is_some() => self.close_leases().await,
            _ => Ok(()),
        }
    }

    /// Blocking form of [`Limiter::close`].
    pub fn close_blocking(&self) -> Result<()> {
        match &self.inner.target {
            Target::Partitions(_) => block_on(self.close()),
            _ if self.inner.pool.is_some() => block_on(self.close()),
            _ => Ok(()),
        }
    }
}
