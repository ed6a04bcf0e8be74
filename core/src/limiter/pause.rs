//! Upstream feedback: `pause` and `observe` ("a third party answered 429: stop the fleet until
//! it said to come back").

use std::time::Duration;

use super::{Limiter, Target};
use crate::error::Result;
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
    /// A longer pause extends the one in effect; a shorter one never shortens it. `reset`
    /// forgets the pause with the rest of the key's state. Returns the pause in effect after
    /// the call (at least `duration`). On Redis the pause is one key with a TTL equal to the
    /// pause, checked inside each call's script (no extra round trip). An unlimited limiter
    /// never pauses and returns zero.
    ///
    /// A `duration` under one microsecond or over 100 years is [`crate::Error::InvalidArgument`]
    /// naming `duration`, and nothing is written.
    pub async fn pause(&self, key: Option<&str>, duration: Duration) -> Result<Duration> {
        let key = validate_key(key)?;
        let duration = validate_duration("duration", duration)?;
        match &self.inner.target {
            Target::Redis { backend, failover } => {
                backend.pause(self.kind(), &self.inner.name, key, failover, duration).await
            }
            _ => Ok(self.pause_local(key, duration)),
        }
    }

    /// Blocking form of [`Limiter::pause`].
    pub fn pause_blocking(&self, key: Option<&str>, duration: Duration) -> Result<Duration> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.pause(key, duration)),
            _ => {
                let key = validate_key(key)?;
                let duration = validate_duration("duration", duration)?;
                Ok(self.pause_local(key, duration))
            }
        }
    }

    fn pause_local(&self, key: &str, duration: Duration) -> Duration {
        match &self.inner.target {
            Target::Memory { backend, namespace } => backend.pause(*namespace, key, duration),
            _ => Duration::ZERO,
        }
    }

    /// Reads an upstream response and pauses `key` for as long as it asks (see
    /// [`crate::upstream`]): on `429` or `503`, `Retry-After` (delta-seconds or HTTP-date), else
    /// `RateLimit-Reset` when `RateLimit-Remaining` is `0`, else `X-RateLimit-Reset` (epoch or
    /// delta seconds). Header names are case-insensitive; malformed values are ignored.
    ///
    /// Returns the pause in effect after the call (see [`Limiter::pause`]), or `None` when the
    /// response asks for no pause (nothing is written then). Dates and epoch instants are read
    /// against this limiter's clock.
    pub async fn observe<K: AsRef<str>, V: AsRef<str>>(
        &self,
        key: Option<&str>,
        status: u16,
        headers: &[(K, V)],
    ) -> Result<Option<Duration>> {
        validate_key(key)?;
        match pause_from_response(status, headers, self.clock().now_micros()) {
            Some(duration) => Ok(Some(self.pause(key, duration).await?)),
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
        validate_key(key)?;
        match pause_from_response(status, headers, self.clock().now_micros()) {
            Some(duration) => Ok(Some(self.pause_blocking(key, duration)?)),
            None => Ok(None),
        }
    }
}
