//! Counters over sub-buckets (Josiah Carlson's sliding window): several
//! `(duration, limit, precision)` limits checked in one pass and recorded in a second, so only
//! admitted calls are counted. A limit whose precision equals its duration is a plain fixed
//! window aligned to the epoch: that is the `bucket` limiter.
//!
//! Time is cut into blocks of `precision`; a limit covers the `blocks = ceil(duration/precision)`
//! most recent blocks, so block `b` stops counting at instant `(b + blocks) * precision`.

use std::collections::VecDeque;

use super::{Combine, Evaluation};
use crate::backend::Op;

/// One limit, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlidingParams {
    pub limit: u64,
    pub duration_us: u64,
    pub precision_us: u64,
    pub blocks: u64,
}

/// All the limits of one limiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sliding {
    pub limits: Box<[SlidingParams]>,
}

/// Per-limit counts: `(block id, count)` oldest first, and their sum.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counter {
    blocks: VecDeque<(u64, u64)>,
    total: u64,
}

impl Counter {
    /// A counter of `blocks` (`(block id, count)` in any order).
    pub(crate) fn from_blocks(mut blocks: Vec<(u64, u64)>) -> Counter {
        blocks.sort_unstable();
        let total = blocks.iter().fold(0u64, |total, &(_, count)| total.saturating_add(count));
        Counter { blocks: blocks.into(), total }
    }
}

/// Per-key state: one counter per limit, in configuration order.
pub(crate) type SlidingState = Vec<Counter>;

impl SlidingParams {
    fn block_id(&self, now: u64) -> u64 {
        now / self.precision_us
    }

    /// Instant at which block `b` stops counting.
    fn expiry_of(&self, block: u64) -> u64 {
        (block + self.blocks) * self.precision_us
    }

    /// Drops the blocks that no longer count at `now`.
    fn trim(&self, counter: &mut Counter, now: u64) {
        let current = self.block_id(now);
        while let Some(&(block, count)) = counter.blocks.front() {
            if block + self.blocks > current {
                break;
            }
            counter.total -= count;
            counter.blocks.pop_front();
        }
    }

    /// Time until `needed` units have left the window.
    fn retry_us(&self, counter: &Counter, now: u64, needed: u64) -> u64 {
        let mut freed = 0;
        for &(block, count) in &counter.blocks {
            freed += count;
            if freed >= needed {
                return self.expiry_of(block) - now;
            }
        }
        // Unreachable while cost <= limit: everything leaves with the newest block.
        counter.blocks.back().map_or(0, |&(b, _)| self.expiry_of(b) - now)
    }

    fn reset_us(&self, counter: &Counter, now: u64) -> u64 {
        counter.blocks.back().map_or(0, |&(b, _)| self.expiry_of(b) - now)
    }
}

impl Sliding {
    /// The smallest limit: a cost above it can never be admitted.
    pub(crate) fn smallest_limit(&self) -> u64 {
        self.limits.iter().map(|l| l.limit).min().unwrap_or(0)
    }

    /// Runs `op` (a check or a peek) on `state` at `now`: the one dispatch from operations to this
    /// engine. The memory backend runs it on its state; the Redis backend replays it on the
    /// counts its script read (the script made the same write). Other operations do not apply
    /// (the caller refuses them) and read as a peek.
    #[inline]
    pub(crate) fn run(&self, state: &mut SlidingState, now: u64, op: Op) -> Evaluation {
        match op {
            Op::Check { cost, .. } => self.evaluate(state, now, cost, true),
            _ => self.evaluate(state, now, 1, false),
        }
    }

    /// Evaluates a call of `cost` (a peek when `commit` is false, which asks about cost 1).
    pub(crate) fn evaluate(&self, state: &mut SlidingState, now: u64, cost: u64, commit: bool) -> Evaluation {
        if state.len() != self.limits.len() {
            // New key, or the limiter was redefined with other limits: start afresh.
            *state = vec![Counter::default(); self.limits.len()];
        }
        let asked = if commit { cost } else { 1 };
        let mut trimmed = false;
        let mut allowed = true;
        for (params, counter) in self.limits.iter().zip(state.iter_mut()) {
            let before = counter.blocks.len();
            params.trim(counter, now);
            trimmed |= counter.blocks.len() != before;
            // Cost 0 is always admitted, even if the count is above this limit (a limiter of the
            // same name with a larger limit may have filled the shared counters).
            allowed &= asked == 0 || counter.total + asked <= params.limit;
        }
        let record = allowed && commit && cost > 0;
        let mut combine = Combine::new(self.limits.len() > 1, self.limits.len());
        for (params, counter) in self.limits.iter().zip(state.iter_mut()) {
            if record {
                let block = params.block_id(now);
                match counter.blocks.back_mut() {
                    Some((b, count)) if *b == block => *count += cost,
                    _ => counter.blocks.push_back((block, cost)),
                }
                counter.total += cost;
            }
            let over = (counter.total + asked).saturating_sub(params.limit);
            let retry = if allowed || over == 0 { 0 } else { params.retry_us(counter, now, over) };
            let remaining = params.limit.saturating_sub(counter.total);
            combine.push(params.duration_us, params.limit, remaining, retry, params.reset_us(counter, now));
        }
        Evaluation { decision: combine.finish(allowed), changed: record || trimmed }
    }

    /// The instant after which this state is indistinguishable from an empty one.
    pub(crate) fn expires_at(&self, state: &SlidingState) -> u64 {
        self.limits
            .iter()
            .zip(state.iter())
            .filter_map(|(p, c)| c.blocks.back().map(|&(b, _)| p.expiry_of(b)))
            .max()
            .unwrap_or(0)
    }
}
