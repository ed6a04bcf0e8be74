//! Stripe's two load shedders. They protect a service rather than limit a user, and refuse with
//! [`Error::Shed`] (HTTP 503), never over-limit (429).
//!
//! - [`FleetShedder`]: non-critical traffic takes a slot of one global concurrent limit (shared
//!   through the backend by the whole fleet); critical traffic bypasses it.
//! - [`UtilizationShedder`]: in-process. The caller supplies a utilization signal (0..=1); the
//!   share of traffic dropped moves slowly with it: nothing happens in the dead zone between
//!   "good" (0.7) and "bad" (0.8); under full pressure shedding starts after ~28 s and reaches
//!   all non-critical traffic ~120 s later, least important traffic first; it recovers as slowly.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::clock::Clock;
use crate::decision::Lease;
use crate::error::{Error, Result};
use crate::limiter::Limiter;

/// Fleet usage load shedder: at most `limit` non-critical requests in flight across the fleet.
#[derive(Debug, Clone)]
pub struct FleetShedder {
    slots: Limiter,
}

/// A slot held by a non-critical request admitted by a [`FleetShedder`] (`None` for critical
/// requests, which hold nothing). Give it back with [`FleetShedder::leave`].
pub type FleetTicket = Option<Lease>;

impl FleetShedder {
    /// A shedder named `name` allowing `limit` non-critical requests in flight at once; a request
    /// that is still in flight after `lock_timeout` (a crashed worker) gives its slot back.
    pub fn new(backend: &Backend, name: &str, limit: u64, lock_timeout: Duration) -> Result<Self> {
        // Its slots are capacity, not mutual exclusion: the backend's failure policy applies as
        // to rate limiters (a per-process share while Redis is down beats shedding everything).
        let slots = backend.concurrent(name, limit, lock_timeout)?.with_wait_timeout(Duration::ZERO)?;
        Ok(FleetShedder { slots: slots.with_allow_fallback(true)? })
    }

    /// Admits a request: critical requests always pass and hold nothing; others take a slot or
    /// fail with [`Error::Shed`].
    pub async fn enter(&self, critical: bool) -> Result<FleetTicket> {
        if critical {
            return Ok(None);
        }
        let decision = self.slots.check(None, 1).await?;
        self.admitted(decision)
    }

    /// Blocking form of [`FleetShedder::enter`].
    pub fn enter_blocking(&self, critical: bool) -> Result<FleetTicket> {
        if critical {
            return Ok(None);
        }
        let decision = self.slots.check_blocking(None, 1)?;
        self.admitted(decision)
    }

    fn admitted(&self, decision: crate::Decision) -> Result<FleetTicket> {
        match decision.lease {
            Some(lease) if decision.allowed => Ok(Some(lease)),
            _ => Err(Error::Shed {
                reason: format!(
                    "fleet usage shedder `{}`: all {} non-critical slots are in use",
                    self.slots.name(),
                    decision.limit
                ),
            }),
        }
    }

    /// Gives back the slot of a finished request.
    pub async fn leave(&self, ticket: FleetTicket) -> Result<()> {
        match ticket {
            Some(lease) => self.slots.release(None, &lease).await,
            None => Ok(()),
        }
    }

    /// Blocking form of [`FleetShedder::leave`].
    pub fn leave_blocking(&self, ticket: FleetTicket) -> Result<()> {
        match ticket {
            Some(lease) => self.slots.release_blocking(None, &lease),
            None => Ok(()),
        }
    }
}

/// Thresholds of a [`UtilizationShedder`]; the defaults are Stripe's.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct UtilizationConfig {
    /// Below this utilization, shedding decreases (default 0.7).
    pub end_of_good: f64,
    /// Above this utilization, shedding increases (default 0.8); in between nothing changes.
    pub start_of_bad: f64,
    /// Seconds of full pressure before anything is shed (default 28: three 8-second samples).
    pub seconds_before_shedding: f64,
    /// Seconds of full pressure from the first drop until all non-critical traffic is shed
    /// (default 120).
    pub seconds_to_shed_all: f64,
    /// Levels of non-critical priority (default 3); priority 0 is critical and never shed,
    /// `levels` is the least important and goes first.
    pub levels: u8,
}

impl Default for UtilizationConfig {
    fn default() -> Self {
        UtilizationConfig {
            end_of_good: 0.7,
            start_of_bad: 0.8,
            seconds_before_shedding: 28.0,
            seconds_to_shed_all: 120.0,
            levels: 3,
        }
    }
}

impl UtilizationConfig {
    fn validate(&self) -> Result<()> {
        let unit = |name: &'static str, v: f64| {
            if v.is_finite() && (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::invalid(name, format!("must be between 0 and 1, got {v}")))
            }
        };
        unit("end_of_good", self.end_of_good)?;
        unit("start_of_bad", self.start_of_bad)?;
        if !(self.end_of_good > 0.0 && self.end_of_good <= self.start_of_bad && self.start_of_bad < 1.0) {
            return Err(Error::invalid("start_of_bad", "need 0 < end_of_good <= start_of_bad < 1"));
        }
        for (name, v) in [
            ("seconds_before_shedding", self.seconds_before_shedding),
            ("seconds_to_shed_all", self.seconds_to_shed_all),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid(name, format!("must be a positive number of seconds, got {v}")));
            }
        }
        if self.levels == 0 {
            return Err(Error::invalid("levels", "at least one non-critical level is required"));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct ShedState {
    /// Seconds of full pressure accumulated, from `-seconds_before_shedding` (resting: the time
    /// still to wait) to `seconds_to_shed_all` (shed everything). Whole seconds of full pressure
    /// add up exactly, unlike shares of traffic.
    pressure_seconds: f64,
    /// Pressure from the latest utilization, -1..=1: seconds of full pressure per second.
    pressure: f64,
    last_changed_us: u64,
    rng: u64,
}

/// Worker utilization load shedder. See the module documentation.
#[derive(Debug)]
pub struct UtilizationShedder {
    config: UtilizationConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<ShedState>,
}

impl UtilizationShedder {
    /// A shedder with `config`, timed by `clock` (a [`crate::SystemClock`] in production).
    pub fn new(config: UtilizationConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        config.validate()?;
        let now = clock.now_micros();
        let seed = {
            use std::hash::BuildHasher;
            foldhash::fast::RandomState::default().hash_one(now) | 1
        };
        Ok(UtilizationShedder {
            state: Mutex::new(ShedState {
                pressure_seconds: -config.seconds_before_shedding,
                pressure: 0.0,
                last_changed_us: now,
                rng: seed,
            }),
            config,
            clock,
        })
    }

    /// Records the current utilization (0 = idle, 1 = every worker busy) and advances the
    /// shedding amount to now. Call it with every request or every sample.
    pub fn observe(&self, utilization: f64) -> Result<()> {
        if !(utilization.is_finite() && (0.0..=1.0).contains(&utilization)) {
            return Err(Error::invalid("utilization", format!("must be between 0 and 1, got {utilization}")));
        }
        let c = &self.config;
        let pressure = if utilization < c.end_of_good {
            utilization / c.end_of_good - 1.0
        } else if utilization < c.start_of_bad {
            0.0
        } else {
            (utilization - c.start_of_bad) / (1.0 - c.start_of_bad)
        };
        // As Stripe does, the new sample drives the time since the previous one.
        let mut state = self.state.lock();
        state.pressure = pressure.clamp(-1.0, 1.0);
        self.advance(&mut state);
        Ok(())
    }

    /// Accumulates pressure up to now; a gap between calls counts for at most
    /// `seconds_before_shedding`, so one stale sample cannot swing it far.
    fn advance(&self, state: &mut ShedState) {
        let c = &self.config;
        let now = self.clock.now_micros();
        let elapsed = (now.saturating_sub(state.last_changed_us) as f64 / 1e6).clamp(0.0, c.seconds_before_shedding);
        state.last_changed_us = now;
        state.pressure_seconds = (state.pressure_seconds + elapsed * state.pressure)
            .clamp(-c.seconds_before_shedding, c.seconds_to_shed_all);
    }

    /// The share of overall non-critical traffic being shed now, 0..=1.
    pub fn shedding(&self) -> f64 {
        let mut state = self.state.lock();
        self.advance(&mut state);
        state.pressure_seconds.max(0.0) / self.config.seconds_to_shed_all
    }

    /// The chance that a request of `priority` is dropped now: 0 for priority 0 (critical);
    /// the least important level (`levels`) is shed first and fully before the next one starts.
    pub fn drop_chance(&self, priority: u8) -> Result<f64> {
        let levels = self.config.levels;
        if priority > levels {
            return Err(Error::invalid(
                "priority",
                format!("must be between 0 (critical) and {levels}, got {priority}"),
            ));
        }
        if priority == 0 {
            return Ok(0.0);
        }
        let rank = f64::from(levels - priority); // 0 for the least important level
        Ok((self.shedding() * f64::from(levels) - rank).clamp(0.0, 1.0))
    }

    /// Admits a request of `priority` or drops it with [`Error::Shed`], with [`Self::drop_chance`].
    pub fn check(&self, priority: u8) -> Result<()> {
        let chance = self.drop_chance(priority)?;
        if chance == 0.0 {
            return Ok(());
        }
        let roll = {
            let mut state = self.state.lock();
            // xorshift64*: plenty for a coin flip, no dependency.
            state.rng ^= state.rng >> 12;
            state.rng ^= state.rng << 25;
            state.rng ^= state.rng >> 27;
            (state.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        };
        if roll < chance {
            return Err(Error::Shed {
                reason: format!(
                    "worker utilization shedder dropped a priority-{priority} request (drop chance {chance:.3})"
                ),
            });
        }
        Ok(())
    }
}
