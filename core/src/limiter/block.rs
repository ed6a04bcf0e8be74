//! Blocking: `block_for` (a refusal keeps the key refused for a while, rate-limiter-flexible's
//! `blockDuration`), and `block` / `unblock` by hand. A block is held where a pause is (see
//! `engine/hold.rs`), under its own key, so `resume` never ends it and metrics count it apart.

use std::time::Duration;

use super::pipeline::{Call, Policy};
use super::{Limiter, Target};
use crate::engine::hold::{Hold, HoldMode as BlockMode};
use crate::engine::{LimiterConfig, Op, Outcome, Served};
use crate::error::Result;
use crate::params::{validate_duration, validate_key};
use crate::runtime::block_on;

/// `block_for` on a limiter: how long a refusal blocks the key (`None`: it blocks nothing).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BlockFor(pub(crate) Option<Duration>);

impl Policy for BlockFor {
    type State = ();

    /// A refusal starts its block on the general path.
    fn leaves_fast_path(&self) -> bool {
        self.0.is_none()
    }

    /// A refusal's block is a second command, which a driven call does not send.
    fn drivable(&self, op: Op) -> bool {
        self.0.is_none() || !matches!(op, Op::Check { .. })
    }

    fn describe(&self, config: &mut LimiterConfig) {
        config.block_for = self.0;
    }

    #[inline(always)]
    fn before(&self, _: &Limiter, _: &str, _: &Call) -> std::result::Result<(), Outcome> {
        Ok(())
    }

    /// A refusal that starts a block asks for it to be written (see
    /// [`Limiter::with_block_for`]).
    #[inline]
    fn hold_after(&self, call: &Call, result: &Result<Outcome>) -> Option<Duration> {
        self.block_to_start(call.op, result)
    }

    /// A refusal that started a block says to come back when it ends.
    #[inline]
    fn after(&self, _: &Limiter, _: &str, call: &Call, _: (), held: Option<Duration>, result: &mut Result<Outcome>) {
        let started = held.filter(|_| self.block_to_start(call.op, result).is_some());
        if let (Some(in_effect), Ok(outcome)) = (started, result) {
            blocked_refusal(outcome, in_effect);
        }
    }
}

impl BlockFor {
    /// The block a refused check starts: `None` when this `result` starts none (no
    /// `block_for`, not a check, allowed, refused by a hold, or not decided by the backend: a
    /// failure policy's answer blocks nothing). A refusal a pause or block caused says nothing
    /// of the caller's use: a block it started would outlive the `resume` that ends the pause,
    /// and extend a block past what the operator set.
    #[inline]
    fn block_to_start(&self, op: Op, result: &Result<Outcome>) -> Option<Duration> {
        let block_for = self.0?;
        match (op, result) {
            (Op::Check { .. }, Ok(o)) if !o.decision.allowed && !o.held && o.served == Served::Backend => {
                Some(block_for)
            }
            _ => None,
        }
    }
}

impl Limiter {
    /// The same limiter (same state, same metrics) whose refusals block the key for
    /// `block_for` (`None`: a refusal blocks nothing, the default): after a check is refused,
    /// every `check`, `peek` and `acquire` of this limiter and key, in every process that
    /// shares the backend, is refused until the block ends, with `retry_after` = the block's
    /// remaining time, consuming nothing. The refusal that starts a block says so in its own
    /// `retry_after`. A block already in effect that ends later is kept. The spec's JSON form
    /// carries it as `"block_for": seconds`. A `block_for` under one microsecond or over 100
    /// years is [`crate::Error::InvalidArgument`] naming `block_for`.
    ///
    /// On Redis the block is written by a second command after the refusing one (only on a
    /// refusal that starts a block: a blocked call is refused inside its own script). If that
    /// write fails, the refusal stands and the next refusal tries again.
    pub fn with_block_for(&self, block_for: Option<Duration>) -> Result<Limiter> {
        let block_for = block_for.map(|d| validate_duration("block_for", d)).transpose()?;
        Ok(self.with(|inner| inner.policies.block = BlockFor(block_for)))
    }

    /// How long a refusal blocks the key (see [`Limiter::with_block_for`]).
    pub fn block_for(&self) -> Option<Duration> {
        self.inner.policies.block.0
    }

    /// Blocks `key` (`None`: the limiter's single shared key) for `duration` from now, in every
    /// process that shares the backend: until it ends (or [`Limiter::unblock`], or
    /// [`Limiter::reset`]), every `check`, `peek` and `acquire` of this limiter and key is
    /// refused with `retry_after` = the block's remaining time, consuming nothing. The block
    /// replaces any block in effect (an operator's word is final, shorter or longer). A block
    /// is not a pause: [`Limiter::resume`] leaves it alone. Returns the block in effect.
    /// Leased partitions and unlimited limiters never block and return zero.
    ///
    /// A `duration` under one microsecond or over 100 years is
    /// [`crate::Error::InvalidArgument`] naming `duration`, and nothing is written.
    pub async fn block(&self, key: Option<&str>, duration: Duration) -> Result<Duration> {
        let key = validate_key(key)?;
        let duration = validate_duration("duration", duration)?;
        self.block_key(key, duration, BlockMode::Set).await
    }

    /// Blocking form of [`Limiter::block`].
    pub fn block_blocking(&self, key: Option<&str>, duration: Duration) -> Result<Duration> {
        let key = validate_key(key)?;
        let duration = validate_duration("duration", duration)?;
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.block_key(key, duration, BlockMode::Set)),
            _ => Ok(self.block_local(key, duration, BlockMode::Set)),
        }
    }

    /// Ends the block of `key` (`None`: the limiter's single shared key) before its time, in
    /// every process that shares the backend. Returns whether a block was in effect. The key's
    /// other state, and a pause, are kept.
    pub async fn unblock(&self, key: Option<&str>) -> Result<bool> {
        let key = validate_key(key)?;
        self.block_lease(key, None);
        self.end_hold(key, Hold::Block).await
    }

    /// Blocking form of [`Limiter::unblock`].
    pub fn unblock_blocking(&self, key: Option<&str>) -> Result<bool> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.unblock(key)),
            _ => Ok(self.end_hold_in_process(validate_key(key)?, Hold::Block)),
        }
    }

    /// Blocks `key` (validated) for `duration` (validated) on the limiter's backend.
    async fn block_key(&self, key: &str, duration: Duration, mode: BlockMode) -> Result<Duration> {
        let in_effect = self.hold_on_backend(key, Hold::Block, duration, mode).await?;
        if let Target::Redis { .. } = &self.inner.target {
            // A leased limiter's lease is spent without a round trip: it must know at once.
            self.block_lease(key, Some(in_effect));
        }
        Ok(in_effect)
    }

    fn block_local(&self, key: &str, duration: Duration, mode: BlockMode) -> Duration {
        self.hold_in_process(key, Hold::Block, duration, mode)
    }

    /// Holds `key` (validated) for `duration` from now, extending a hold in effect: the
    /// pipeline's [`super::pipeline::Io::hold`] on the runtime.
    pub(crate) async fn hold_key(&self, key: &str, duration: Duration) -> Result<Duration> {
        self.block_key(key, duration, BlockMode::Extend).await
    }

    /// [`Limiter::hold_key`] on an in-process target.
    pub(crate) fn hold_local(&self, key: &str, duration: Duration) -> Result<Duration> {
        Ok(self.block_local(key, duration, BlockMode::Extend))
    }
}

/// A refusal that started a block of `in_effect`: it says to come back when the block ends
/// (or later, when the limiter's own state says so).
fn blocked_refusal(outcome: &mut Outcome, in_effect: Duration) {
    let d = &mut outcome.decision;
    d.retry_after = d.retry_after.max(in_effect);
    d.reset_after = d.reset_after.max(in_effect);
}
