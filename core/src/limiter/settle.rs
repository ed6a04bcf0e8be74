//! Settles: a call checked with an estimated cost is corrected to its actual cost once the cost
//! is known, exactly once (see `docs/src/concepts/settle.md` for each kind's rule).
//!
//! An admitted decision of a counting kind carries a [`SettleTicket`]: the key, the cost, the
//! instant it was charged at and an id made at check time. [`Limiter::settle`] turns it into
//! `Op::Settle`, which each engine applies by its own rule; the backend records the id so that a
//! repeat (a retry after a lost reply, a second call) changes nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::{Limiter, Target};
use crate::decision::{Decision, SettleTicket};
use crate::engine::{Algorithm, Kind, Op, Outcome, Served};
use crate::error::{Error, Result};
use crate::metrics::Counter;
use crate::params::validate_cost;

/// The identity settle tickets name a limiter by: its kind, name and state (limiters of one
/// name on one state settle each other's decisions); 0 for a limiter whose decisions cannot be
/// settled. The state of a memory backend is that backend; on Redis it is the key prefix, so
/// that a decision checked in one process is settled in another (a job carries its ticket).
pub(super) fn identity(algorithm: &Algorithm, target: &Target, kind: Kind, name: &str) -> u64 {
    if !settles(algorithm) {
        return 0;
    }
    let bytes = kind.as_str().bytes().chain([0xff]).chain(name.bytes()).chain([0xff]).map(u64::from);
    match target {
        Target::Memory { backend, .. } => {
            crate::engine::fingerprint(bytes.chain([std::sync::Arc::as_ptr(backend) as usize as u64]))
        }
        // Marked apart from the memory backend's pointer, whose bytes a prefix could spell.
        Target::Redis { backend, .. } => {
            crate::engine::fingerprint(bytes.chain([0x100]).chain(backend.prefix().bytes().map(u64::from)))
        }
        Target::Partitions(_) | Target::Nowhere => 0,
    }
}

/// Whether an engine has a settle rule.
fn settles(algorithm: &Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::Gcra(_) | Algorithm::Calendar(_) | Algorithm::Sliding(_) | Algorithm::Log(_) | Algorithm::Leased(_)
    )
}

/// A settle id: unique per process and call, and across processes (a prefix derived from the
/// pid and a random seed), so that two processes' settles of one key never share an id. A
/// forked child inherits its parent's seed and counter; its pid gives it a prefix of its own
/// (two children of one preloaded parent would otherwise make the same ids, and the second's
/// settles would be skipped as repeats).
#[inline(always)]
fn next_settle_id() -> u64 {
    // Kept below 2^53 so every binding's numbers hold it exactly; never 0. Multiplying by an odd
    // constant is one-to-one below 2^53, so distinct counts give distinct ids.
    ((id_prefix() ^ next_count().wrapping_mul(0x9e37_79b9_7f4a_7c15)) & ((1 << 53) - 1)).max(1)
}

/// This process's id prefix: a hash of its pid under a seed drawn once (and inherited by forked
/// children). Cached per thread with the pid it was made for; the pid is cached process-wide
/// and forgotten in a forked child (`runtime::forked_since`), so a fork is noticed without a
/// system call.
#[inline(always)]
fn id_prefix() -> u64 {
    use std::cell::Cell;
    thread_local!(static PREFIX: Cell<(u32, u64)> = const { Cell::new((0, 0)) });
    PREFIX.with(|cached| {
        let (pid, prefix) = cached.get();
        let (now_pid, forked) = crate::runtime::forked_since(pid);
        if !forked {
            return prefix;
        }
        let prefix = prefix_of(now_pid);
        cached.set((now_pid, prefix));
        prefix
    })
}

/// The id prefix of process `pid`.
#[cold]
fn prefix_of(pid: u32) -> u64 {
    use std::hash::BuildHasher;
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(|| foldhash::fast::RandomState::default().hash_one(std::time::SystemTime::now()));
    foldhash::fast::FixedState::with_seed(seed).hash_one(pid)
}

/// How many counts a thread takes from the process's counter at a time.
const COUNTS_PER_THREAD_BLOCK: u64 = 1 << 16;

/// A count never returned before in this process. Each thread takes a block of counts from one
/// shared counter and hands them out alone: a shared counter written by every check moved its
/// cache line between the cores of threads checking at once.
#[inline(always)]
fn next_count() -> u64 {
    use std::cell::Cell;
    static BLOCKS: AtomicU64 = AtomicU64::new(1);
    // The next count of this thread's block and the end of the block (equal: no block yet).
    thread_local!(static BLOCK: Cell<(u64, u64)> = const { Cell::new((0, 0)) });
    BLOCK.with(|block| {
        let (mut next, mut end) = block.get();
        if next == end {
            next = BLOCKS.fetch_add(COUNTS_PER_THREAD_BLOCK, Ordering::Relaxed);
            end = next + COUNTS_PER_THREAD_BLOCK;
        }
        block.set((next + 1, end));
        next
    })
}

impl Limiter {
    /// Adds a settle ticket to an admitted decision of a kind that can be settled, when the
    /// backend decided it: a call allowed while failing open charged nothing, and one the
    /// in-memory fallback decided charged the fallback, which a settle could not reach.
    #[inline]
    pub(crate) fn ticketed(&self, decision: Decision, served: Served, key: &str, cost: u64) -> Decision {
        self.ticketed_at(decision, served, key, cost, None)
    }

    /// [`Limiter::ticketed`], for a call whose charge was made at `charged_at` (µs) rather than
    /// at its decision's instant: a leased call's tokens were taken from the shared bucket when
    /// their lease was granted.
    #[inline]
    pub(crate) fn ticketed_at(
        &self,
        mut decision: Decision,
        served: Served,
        key: &str,
        cost: u64,
        charged_at: Option<u64>,
    ) -> Decision {
        // A call that consumed nothing has nothing to settle.
        if decision.consumed() && self.inner.settle_identity != 0 && served == Served::Backend {
            decision.settle = Some(SettleTicket {
                key: key.into(),
                cost,
                charged_at_micros: charged_at.unwrap_or(decision.decided_at_micros),
                id: next_settle_id(),
                limiter: self.inner.settle_identity,
            });
        }
        decision
    }

    /// A settle id for the fast path, which builds its tickets in place.
    #[inline(always)]
    pub(super) fn next_settle_id(&self) -> u64 {
        next_settle_id()
    }

    /// [`Limiter::granted`](super::Limiter) with the decision's settle ticket.
    #[inline]
    pub(super) fn ticketed_granted(
        &self,
        outcome: Outcome,
        waited: Option<std::time::Duration>,
        key: &str,
        cost: u64,
    ) -> Decision {
        let (served, charged_at) = (outcome.served, outcome.charged_at);
        self.ticketed_at(self.granted(outcome, waited), served, key, cost, charged_at)
    }

    /// Adds a settle ticket to the decision of `op` on `key` when `op` is a check (the calls that
    /// run an operation directly: an event loop's driven calls).
    #[inline]
    pub(crate) fn ticketed_op(&self, outcome: Outcome, key: &str, op: Op) -> Decision {
        match op {
            Op::Check { cost, .. } => self.ticketed_at(outcome.decision, outcome.served, key, cost, outcome.charged_at),
            _ => outcome.decision,
        }
    }

    /// Settles `decision` (an admitted call of this limiter, checked with an estimated cost) to
    /// its `actual` cost: the difference is charged or refunded, exactly once however often the
    /// same decision is settled (a retry after a lost reply is safe). Returns the state after
    /// the settle, as a `peek` reports it.
    ///
    /// A charge is applied even past the limit (the work is done): later calls wait until the
    /// debt is paid back. A refund never gives back more than the call took, nor to a window
    /// that has rolled over. A decision that cannot be settled (refused, from a concurrent,
    /// unlimited or partitions limiter, from another limiter, or older than the
    /// [`SETTLE_WINDOW`](crate::SETTLE_WINDOW)) is [`Error::InvalidArgument`] naming
    /// `decision`; an `actual` that is not a cost is one naming `actual`. Nothing is written in
    /// either case. A settle that cannot reach Redis returns the backend's error whatever the
    /// failure policy (it is not an admission): retry it, it applies once.
    pub async fn settle(&self, decision: &Decision, actual: u64) -> Result<Decision> {
        let (key, op) = self.settle_op(decision, actual)?;
        // A refund may admit what this process remembers as refused (the deny cache, a lease's
        // remembered refusal).
        self.forget_refusal(key);
        self.forget_leased_refusal(key);
        let outcome = match &self.inner.target {
            Target::Memory { .. } => self.settle_local(key, op),
            _ => self.run(key, op).await,
        };
        self.settled(op, outcome)
    }

    /// Blocking form of [`Limiter::settle`].
    pub fn settle_blocking(&self, decision: &Decision, actual: u64) -> Result<Decision> {
        let (key, op) = self.settle_op(decision, actual)?;
        // A refund may admit what this process remembers as refused (the deny cache, a lease's
        // remembered refusal).
        self.forget_refusal(key);
        self.forget_leased_refusal(key);
        let outcome = match &self.inner.target {
            Target::Memory { .. } => self.settle_local(key, op),
            _ => self.run_blocking(key, op),
        };
        self.settled(op, outcome)
    }

    /// The settle of `decision` to `actual`, or the error naming what is wrong with them.
    fn settle_op<'d>(&self, decision: &'d Decision, actual: u64) -> Result<(&'d str, Op)> {
        validate_cost("actual", actual)?;
        let Some(ticket) = &decision.settle else {
            let why = if !decision.allowed {
                "was refused: a refused call consumed nothing, so there is nothing to settle"
            } else {
                "cannot be settled: only an admitted call of a counting limiter (token_bucket, leaky, points, \
                 bucket, window, sliding_window, calendar, leased) carries a settle ticket"
            };
            return Err(Error::invalid("decision", why));
        };
        if ticket.limiter != self.inner.settle_identity {
            return Err(Error::invalid(
                "decision",
                format!(
                    "was made by another limiter than {:?}: settle it with the limiter that checked it",
                    self.name()
                ),
            ));
        }
        // No admitted call of this limiter costs more than its capacity (under its spec, or a
        // live override of the key's): a ticket that says so was not issued by it.
        let capacity = match self.override_for(&ticket.key) {
            Some(over) => self.inner.algorithm.capacity().max(over.algorithm.capacity()),
            None => self.inner.algorithm.capacity(),
        };
        if ticket.cost > capacity {
            return Err(Error::invalid(
                "decision",
                format!(
                    "says it was charged {}, more than {:?} admits in one call ({capacity}): it was not issued by this limiter",
                    ticket.cost,
                    self.name()
                ),
            ));
        }
        let op = Op::Settle { id: ticket.id, cost: ticket.cost, actual, at: ticket.charged_at_micros };
        Ok((ticket.key.as_str(), op))
    }

    /// Runs a settle on the memory backend, once per id.
    fn settle_local(&self, key: &str, op: Op) -> Result<Outcome> {
        let Target::Memory { backend, namespace } = &self.inner.target else { return self.run_local(key, op) };
        match self.override_for(key) {
            None => backend.settle(*namespace, key, &self.inner.algorithm, op),
            Some(over) => backend.settle(*namespace, key, &over.algorithm, op),
        }
    }

    /// The decision a settle reports; a settle applied (not a repeat) is counted in the
    /// limiter's metrics. A settle never fails open nor falls back (the backend returns its
    /// error: the correction did not apply).
    fn settled(&self, op: Op, outcome: Result<Outcome>) -> Result<Decision> {
        let outcome = outcome?;
        if let (Op::Settle { cost, actual, .. }, false) = (op, outcome.settle_repeated) {
            let m = &self.inner.metrics;
            m.add(Counter::Settles, 1);
            m.add(Counter::SettleCharged, actual.saturating_sub(cost));
            m.add(Counter::SettleRefunded, cost.saturating_sub(actual));
        }
        Ok(outcome.decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids taken by threads at once, past the end of a thread's first block, are all distinct,
    /// non-zero and below 2^53.
    #[test]
    fn settle_ids_are_unique_across_threads() {
        let per_thread = COUNTS_PER_THREAD_BLOCK as usize + 1_000;
        let taken: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> =
                (0..4).map(|_| s.spawn(move || (0..per_thread).map(|_| next_settle_id()).collect())).collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let mut all: Vec<u64> = taken.into_iter().flatten().collect();
        assert!(all.iter().all(|&id| id != 0 && id < 1 << 53));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4 * per_thread, "an id was handed out twice");
    }
}
