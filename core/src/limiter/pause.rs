//! Upstream feedback: `pause` and `observe` ("a third party answered 429: stop the fleet until
//! it said to come back"), bounded by `max_pause`, and `resume` ("the operator says: go").

use std::time::Duration;

use super::{Limiter, Target};
use crate::engine::hold::{Hold, HoldMode};
use crate::error::Result;
use crate::metrics::Counter;
use crate::params::{validate_duration, validate_key};
use crate::runtime::block_on;
use crate::upstream::pause_from_response;

impl Limiter {
    /// Pauses `key` (`None`: the limiter's single shared key) for `duration`: until the pause
    /// ends, every `check`, `peek` and `acquire` on this limiter and key, in every process that
    /// shares the backend, is refused with `retry_after` = the pause's remaining time. A paused
    /// refusal consumes nothing; `acquire` sleeps until the pause ends (when its wait timeout
    /// allows) and then checks as usual. Releases of leases taken before the pause still apply.
    ///
    /// A `duration` over the limiter's `max_pause` (default one hour, see
    /// [`Limiter::with_max_pause`]) pauses for `max_pause`, counted in
    /// [`crate::Metrics::pauses_clamped`]. A longer pause extends the one in effect; a shorter
    /// one never shortens it. `reset` forgets the pause with the rest of the key's state, and
    /// [`Limiter::resume`] ends it alone. Returns the pause in effect after the call (at least
    /// the pause asked for, once clamped). On Redis the pause is one key with a TTL equal to the
    /// pause, checked inside each call's script (no extra round trip). An unlimited limiter
    /// never pauses and returns zero.
    ///
    /// A `duration` under one microsecond or over 100 years is [`crate::Error::InvalidArgument`]
    /// naming `duration`, and nothing is written.
    pub async fn pause(&self, key: Option<&str>, duration: Duration) -> Result<Duration> {
        let key = validate_key(key)?;
        let duration = validate_duration("duration", duration)?;
        self.pause_within(key, duration, self.inner.max_pause).await
    }

    /// Pauses `key` (validated) for `duration` (validated), clamped to `max_pause`.
    async fn pause_within(&self, key: &str, duration: Duration, max_pause: Duration) -> Result<Duration> {
        let duration = self.clamp_pause(duration, max_pause);
        self.hold_on_backend(key, Hold::Pause, duration, HoldMode::Extend).await
    }

    /// Blocking form of [`Limiter::pause`].
    pub fn pause_blocking(&self, key: Option<&str>, duration: Duration) -> Result<Duration> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.pause(key, duration)),
            _ => {
                let key = validate_key(key)?;
                let duration = validate_duration("duration", duration)?;
                Ok(self.pause_local(key, self.clamp_pause(duration, self.inner.max_pause)))
            }
        }
    }

    /// `duration`, or `max_pause` when it is longer (counted as a clamp).
    fn clamp_pause(&self, duration: Duration, max_pause: Duration) -> Duration {
        if duration > max_pause && !matches!(self.inner.target, Target::Nowhere) {
            self.inner.metrics.add(Counter::PausesClamped, 1);
        }
        duration.min(max_pause)
    }

    /// Ends the pause of `key` (`None`: the limiter's single shared key) before its time, in
    /// every process that shares the backend: the operator's answer to a pause that is wrong
    /// or no longer needed. Returns whether a pause was in effect. The key's other state is
    /// kept (unlike [`Limiter::reset`]). Callers already waiting out the pause in `acquire`
    /// re-check when their wait ends; new calls are decided at once: this process forgets its
    /// remembered refusals of the key at once, the other processes at their next live poll.
    pub async fn resume(&self, key: Option<&str>) -> Result<bool> {
        self.end_hold(validate_key(key)?, Hold::Pause).await
    }

    /// Blocking form of [`Limiter::resume`].
    pub fn resume_blocking(&self, key: Option<&str>) -> Result<bool> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.resume(key)),
            _ => Ok(self.end_hold_in_process(validate_key(key)?, Hold::Pause)),
        }
    }

    fn pause_local(&self, key: &str, duration: Duration) -> Duration {
        self.hold_in_process(key, Hold::Pause, duration, HoldMode::Extend)
    }

    /// Reads an upstream response and pauses `key` for as long as it asks (see
    /// [`crate::upstream`]): on `429` or `503`, `Retry-After` (delta-seconds or HTTP-date), else
    /// `RateLimit-Reset` when `RateLimit-Remaining` is `0`, else `X-RateLimit-Reset` (epoch or
    /// delta seconds). Header names are case-insensitive; malformed values are ignored.
    ///
    /// Returns the pause in effect after the call (see [`Limiter::pause`]), or `None` when the
    /// response asks for no pause (nothing is written then). Dates and epoch instants are read
    /// against this limiter's clock. A pause longer than the limiter's `max_pause` (default one
    /// hour) is clamped to it; see [`Limiter::observe_within`] to bound one call otherwise.
    pub async fn observe<K: AsRef<str>, V: AsRef<str>>(
        &self,
        key: Option<&str>,
        status: u16,
        headers: &[(K, V)],
    ) -> Result<Option<Duration>> {
        self.observe_within(key, status, headers, None).await
    }

    /// [`Limiter::observe`] with this call's own `max_pause` (`None`: the limiter's). A
    /// `max_pause` under one microsecond or over 100 years is [`crate::Error::InvalidArgument`]
    /// naming `max_pause`, and nothing is written.
    pub async fn observe_within<K: AsRef<str>, V: AsRef<str>>(
        &self,
        key: Option<&str>,
        status: u16,
        headers: &[(K, V)],
        max_pause: Option<Duration>,
    ) -> Result<Option<Duration>> {
        let (key, max_pause) = self.observe_args(key, max_pause)?;
        match pause_from_response(status, headers, self.clock().now_micros()) {
            Some(duration) => Ok(Some(self.pause_within(key, duration, max_pause).await?)),
            None => Ok(None),
        }
    }

    /// Blocking form of [`Limiter::observe`].
    pub fn observe_blocking<K: AsRef<str>, V: AsRef<str>>(
        &self,
        key: Option<&str>,
        status: u16,
        headers: &[(K, V)],
    ) -> Result<Option<Duration>> {
        self.observe_within_blocking(key, status, headers, None)
    }

    /// Blocking form of [`Limiter::observe_within`].
    pub fn observe_within_blocking<K: AsRef<str>, V: AsRef<str>>(
        &self,
        key: Option<&str>,
        status: u16,
        headers: &[(K, V)],
        max_pause: Option<Duration>,
    ) -> Result<Option<Duration>> {
        let (key, max_pause) = self.observe_args(key, max_pause)?;
        let Some(duration) = pause_from_response(status, headers, self.clock().now_micros()) else {
            return Ok(None);
        };
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.pause_within(key, duration, max_pause)).map(Some),
            _ => Ok(Some(self.pause_local(key, self.clamp_pause(duration, max_pause)))),
        }
    }

    /// `observe`'s key and the bound of its pause, validated before anything is written.
    fn observe_args<'k>(&self, key: Option<&'k str>, max_pause: Option<Duration>) -> Result<(&'k str, Duration)> {
        let key = validate_key(key)?;
        let max_pause = match max_pause {
            Some(m) => validate_duration("max_pause", m)?,
            None => self.inner.max_pause,
        };
        Ok((key, max_pause))
    }
}
