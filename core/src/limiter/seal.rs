//! Sealed settle tickets: a ticket that leaves the process as plain data (JSON in a job, a queue
//! message) carries a seal, and is settled only if the seal matches it (see `settle_seal`). The
//! bindings whose decisions are plain values (Node) seal a ticket when it is serialized and ask
//! for the seal of any ticket they did not issue in process.

use std::sync::Arc;

use super::{Limiter, Target};
use crate::decision::{Decision, SettleTicket};
use crate::error::{Error, Result};
use crate::settle_seal::SealKey;

impl Limiter {
    /// The seal of `ticket` (a ticket of this limiter's decision): what a ticket carried out of
    /// the process needs for [`Limiter::settle_sealed`], in any process of the fleet (on Redis,
    /// every backend on the same Redis and key prefix shares the secret). The first seal or
    /// check of a seal on a Redis backend reads (or creates) that secret in Redis.
    pub async fn seal(&self, ticket: &SettleTicket) -> Result<String> {
        self.own_ticket(ticket)?;
        let key = match &self.inner.target {
            Target::Redis { backend, .. } => backend.seal_key(false).await?,
            _ => self.local_seal_key()?,
        };
        Ok(key.seal(ticket))
    }

    /// Blocking form of [`Limiter::seal`].
    pub fn seal_blocking(&self, ticket: &SettleTicket) -> Result<String> {
        self.own_ticket(ticket)?;
        let key = match &self.inner.target {
            Target::Redis { backend, .. } => backend.seal_key_blocking(false)?,
            _ => self.local_seal_key()?,
        };
        Ok(key.seal(ticket))
    }

    /// [`Limiter::settle`] of a decision that came back from outside the process with its
    /// ticket's `seal`: a seal that does not match the ticket (a field altered, a ticket made
    /// up, or sealed under another Redis or key prefix) is [`Error::InvalidArgument`] naming
    /// `decision`, and nothing is written.
    pub async fn settle_sealed(&self, decision: &Decision, actual: u64, seal: &str) -> Result<Decision> {
        let ticket = self.ticket_of(decision)?;
        let verified = match &self.inner.target {
            Target::Redis { backend, .. } => {
                backend.seal_key(false).await?.verifies(ticket, seal)
                    // The secret may have been replaced since it was cached (the key was deleted
                    // and another process created it again): read it once more.
                    || backend.seal_key(true).await?.verifies(ticket, seal)
            }
            _ => self.local_seal_key()?.verifies(ticket, seal),
        };
        if !verified {
            return Err(broken_seal());
        }
        self.settle(decision, actual).await
    }

    /// Blocking form of [`Limiter::settle_sealed`].
    pub fn settle_sealed_blocking(&self, decision: &Decision, actual: u64, seal: &str) -> Result<Decision> {
        let ticket = self.ticket_of(decision)?;
        let verified = match &self.inner.target {
            Target::Redis { backend, .. } => {
                backend.seal_key_blocking(false)?.verifies(ticket, seal)
                    || backend.seal_key_blocking(true)?.verifies(ticket, seal)
            }
            _ => self.local_seal_key()?.verifies(ticket, seal),
        };
        if !verified {
            return Err(broken_seal());
        }
        self.settle_blocking(decision, actual)
    }

    /// The ticket of `decision`, if it is this limiter's.
    fn ticket_of<'d>(&self, decision: &'d Decision) -> Result<&'d SettleTicket> {
        let Some(ticket) = &decision.settle else {
            return Err(Error::invalid(
                "decision",
                "carries no settle ticket: only an admitted call of a counting limiter can be settled",
            ));
        };
        self.own_ticket(ticket)?;
        Ok(ticket)
    }

    /// Refuses a ticket of another limiter.
    fn own_ticket(&self, ticket: &SettleTicket) -> Result<()> {
        if ticket.limiter == 0 || ticket.limiter != self.inner.settle_identity {
            return Err(Error::invalid(
                "decision",
                format!(
                    "was made by another limiter than {:?}: settle it with the limiter that checked it",
                    self.name()
                ),
            ));
        }
        Ok(())
    }

    /// The seal key of a memory backend's limiter.
    fn local_seal_key(&self) -> Result<Arc<SealKey>> {
        match &self.inner.target {
            Target::Memory { backend, .. } => Ok(backend.seal_key()),
            _ => Err(Error::invalid("decision", "cannot be settled: this limiter's decisions carry no settle ticket")),
        }
    }
}

/// The error of a ticket whose seal does not match it.
fn broken_seal() -> Error {
    Error::invalid(
        "decision",
        "its settle ticket's seal does not match the ticket: it was altered, made up, or sealed by a backend on \
         another Redis or key prefix; nothing was settled",
    )
}
