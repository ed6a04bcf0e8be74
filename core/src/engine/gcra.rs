//! GCRA (generic cell rate algorithm, "virtual scheduling"): the one engine behind the token
//! bucket, the leaky bucket and the points limiter. State is a single number, the theoretical
//! arrival time (TAT): the instant at which the bucket would be full again.
//!
//! With emission interval `T` (time to earn one unit) and tolerance `tau = capacity * T`, a call
//! of cost `c` at `now` is admitted iff `max(tat, now) + c*T - now <= tau`.
//!
//! Time per unit is rarely a whole number of microseconds (`rate = 700000` earns a token every
//! 1.428… µs), so the engine counts in *ticks* finer than a microsecond: 1 ns when the limiter's
//! horizon allows it, else 10, 100 or 1000 ns, chosen per limiter (see [`Gcra::compile`]) so
//! that every figure of a decision stays below 2^53 ticks, exact in a Lua double, and `T` is
//! within 0.1% of the exact time per unit (a limiter that cannot be is refused). The state is
//! kept in nanoseconds whatever the tick, so a limiter whose spec changes keeps its state.

use std::sync::LazyLock;

use redis::Cmd;

use super::contract::{malformed, not_applicable, Combined, Engine, Evaluation, Op, Outcome};
use super::decision;
use super::divisor::Divisor;
use super::lua::LuaScript;
use super::packed::Packed;
use super::words;
use crate::error::{Error, Result};
use std::time::Duration;

use super::kinds::{share, KindSpec};
use super::spec_json::{number, secs};
use super::spec_json::{JsonFields, JsonWriter};
use super::Algorithm;
use crate::params::{micros, validate_count, validate_duration, MAX_COUNT, MAX_DURATION};

/// How far ahead of now the TAT may run, in capacities: a charge reported through
/// `points_used` beyond capacity is debt the bucket waits out, up to 15 capacities beyond empty
/// (and never more than 100 years); anything beyond that is forgiven.
pub const MAX_AHEAD_CAPACITIES: u64 = 16;

/// The largest relative error accepted between the time per unit a limiter asks for and the
/// one it gets (0.1%).
const MAX_ROUNDING_ERROR: f64 = 0.001;

const NS_PER_US: u64 = 1000;

/// GCRA parameters in ticks of `tick_ns` nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    /// Nanoseconds per tick: 1, 10, 100 or 1000 (a divisor of a microsecond).
    pub tick_ns: u64,
    /// Time to earn back one unit, in ticks.
    pub emission: u64,
    /// `capacity * emission`: how far ahead of `now` an admitted call may push the TAT.
    pub tau: u64,
    /// How far ahead of `now` the TAT may run at all, in ticks: `tau` plus the largest debt
    /// `points_used` may charge (see [`MAX_AHEAD_CAPACITIES`]).
    pub max_ahead: u64,
    /// The burst size, reported as the decision's `limit`.
    pub capacity: u64,
    /// `emission`, prepared for the division of every decision's `remaining`.
    per_unit: Divisor,
}

/// Per-key state: the theoretical arrival time in nanoseconds since the epoch; 0 (or any past
/// instant) is a full bucket.
pub(crate) type GcraState = u64;

/// One GCRA evaluation as plain figures (see [`Gcra::figures`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figures {
    pub allowed: bool,
    /// The state was written.
    pub changed: bool,
    pub remaining: u64,
    pub retry_us: u64,
    pub reset_us: u64,
}

impl Figures {
    /// The decision these figures make, for a bucket of `capacity`.
    #[inline(always)]
    pub(crate) fn decision(self, capacity: u64) -> crate::Decision {
        decision(self.allowed, capacity, self.remaining, self.retry_us, self.reset_us)
    }
}

impl Gcra {
    /// Compiles `token_bucket(rate, capacity)`: `rate` tokens per second (at most 1,000,000).
    pub(crate) fn token_bucket(rate: f64, capacity: u64) -> Result<Gcra> {
        if !rate.is_finite() || rate <= 0.0 || rate > 1e6 {
            return Err(Error::invalid(
                "rate",
                format!("must be a finite number above 0 and at most 1000000 per second, got {rate}"),
            ));
        }
        let capacity = validate_count("capacity", capacity)?;
        Gcra::compile("capacity", capacity, "rate", |ticks_per_us| 1e6 * ticks_per_us as f64 / rate)
    }

    /// Compiles `leaky(size, drain)`: a full bucket drains in `drain`.
    pub(crate) fn leaky(size: u64, drain: Duration) -> Result<Gcra> {
        let size = validate_count("size", size)?;
        let drain_us = micros(validate_duration("drain", drain)?);
        Gcra::compile("size", size, "drain", per_unit(drain_us, size))
    }

    /// Compiles `points(capacity, refill)`: an empty bucket refills in `refill`.
    pub(crate) fn points(capacity: u64, refill: Duration) -> Result<Gcra> {
        let capacity = validate_count("capacity", capacity)?;
        let refill_us = micros(validate_duration("refill", refill)?);
        Gcra::compile("capacity", capacity, "refill", per_unit(refill_us, capacity))
    }

    /// Builds the engine for `capacity` units earned back at `units_per_us(ticks_per_us)`: the
    /// exact time per unit in ticks, given the ticks per microsecond. Chooses the finest tick
    /// whose horizon (`max_ahead`) fits 2^53 ticks; refuses, naming `period_name`, a time per
    /// unit under a microsecond (faster than 1,000,000 per second) or one that no tick
    /// represents within 0.1%, and, naming `capacity_name`, a horizon beyond 2^53 microseconds.
    pub(crate) fn compile(
        capacity_name: &'static str,
        capacity: u64,
        period_name: &'static str,
        exact_emission: impl Fn(u64) -> f64,
    ) -> Result<Gcra> {
        if exact_emission(1) < 1.0 {
            return Err(Error::invalid(
                period_name,
                "gives less than one microsecond per unit; the finest rate is 1,000,000 per second",
            ));
        }
        let horizon_us = micros(MAX_DURATION);
        for ticks_per_us in [1000, 100, 10, 1] {
            let exact = exact_emission(ticks_per_us);
            let emission = exact.round();
            if emission > MAX_COUNT as f64 {
                continue;
            }
            let emission = emission as u64;
            let Some(tau) = capacity.checked_mul(emission).filter(|tau| *tau <= MAX_COUNT) else { continue };
            let max_ahead = tau.max((tau.saturating_mul(MAX_AHEAD_CAPACITIES)).min(horizon_us * ticks_per_us));
            if max_ahead > MAX_COUNT {
                continue;
            }
            if (emission as f64 - exact).abs() > MAX_ROUNDING_ERROR * exact {
                return Err(Error::invalid(
                    period_name,
                    format!(
                        "gives {:.4} µs per unit, which cannot be kept within 0.1% for a capacity of {capacity} \
                         (capacity × time per unit must stay under 2^53 ticks of {} ns)",
                        exact / ticks_per_us as f64,
                        NS_PER_US / ticks_per_us
                    ),
                ));
            }
            let per_unit = Divisor::new(emission);
            return Ok(Gcra { tick_ns: NS_PER_US / ticks_per_us, emission, tau, max_ahead, capacity, per_unit });
        }
        Err(Error::invalid(capacity_name, "times the time per unit exceeds 2^53 microseconds"))
    }

    /// Ticks from `now` (microseconds) to `tat`, 0 when `tat` is past, at most `max_ahead` (a
    /// state written under another spec may run further ahead).
    #[inline(always)]
    fn used(&self, tat: GcraState, now: u64) -> u64 {
        let ahead_ns = tat.saturating_sub(now.saturating_mul(NS_PER_US));
        // Nanosecond ticks are the common case: skip the division (a slow instruction) for them.
        let ticks = if self.tick_ns == 1 { ahead_ns } else { ahead_ns / self.tick_ns };
        ticks.min(self.max_ahead)
    }

    /// `ticks` as microseconds, rounded up: a caller that waits `retry_after` is admitted.
    #[inline(always)]
    fn micros(&self, ticks: u64) -> u64 {
        // In 64 bits whenever the product fits (every call short of extreme horizons): a 128-bit
        // division is a library call, far slower than the constant division here.
        match ticks.checked_mul(self.tick_ns) {
            Some(ns) => ns.div_ceil(NS_PER_US),
            None => (u128::from(ticks) * u128::from(self.tick_ns)).div_ceil(u128::from(NS_PER_US)) as u64,
        }
    }

    /// Evaluates a call of `cost` (or a peek when `commit` is false, which asks about cost 1).
    #[inline]
    pub(crate) fn evaluate(&self, tat: &mut GcraState, now: u64, cost: u64, commit: bool) -> Evaluation {
        let f = self.figures(tat, now, cost, commit);
        Evaluation { decision: f.decision(self.capacity), changed: f.changed }
    }

    /// The rule of [`Gcra::evaluate`], answering in scalars: the memory backend's hot path keeps
    /// them in registers and builds the decision once, in its caller's return slot, instead of
    /// moving a whole `Decision` through the evaluation.
    #[inline(always)]
    pub(crate) fn figures(&self, tat: &mut GcraState, now: u64, cost: u64, commit: bool) -> Figures {
        let used = self.used(*tat, now);
        let asked = if commit { cost } else { 1 };
        let after = used + asked * self.emission;
        // Cost 0 is always admitted (it records nothing), even when an overcharge reported through
        // `points_used` has pushed `used` beyond `tau`.
        let allowed = after <= self.tau || asked == 0;
        let available = || self.per_unit.divide(self.tau.saturating_sub(used));
        if !allowed {
            let (remaining, retry_us, reset_us) = (available(), self.micros(after - self.tau), self.micros(used));
            return Figures { allowed: false, changed: false, remaining, retry_us, reset_us };
        }
        if !commit || cost == 0 {
            return Figures {
                allowed: true,
                changed: false,
                remaining: available(),
                retry_us: 0,
                reset_us: self.micros(used),
            };
        }
        *tat = now.saturating_mul(NS_PER_US).saturating_add(after * self.tick_ns);
        let remaining = self.per_unit.divide(self.tau - after);
        Figures { allowed: true, changed: true, remaining, retry_us: 0, reset_us: self.micros(after) }
    }

    /// Runs `op` (a check, a peek, or an adjustment followed by a peek) on `tat` at `now`: the one
    /// dispatch from operations to this engine. The memory backend runs it on its state; the
    /// Redis backend replays it on the state its script read (the script made the same write).
    /// Release and extend do not apply to GCRA (the caller refuses them) and read as a peek.
    #[inline]
    pub(crate) fn run(&self, tat: &mut GcraState, now: u64, op: Op) -> Evaluation {
        match op {
            Op::Check { cost, .. } => self.evaluate(tat, now, cost, true),
            Op::Adjust { estimate, actual } | Op::Settle { cost: estimate, actual, .. } => {
                let charged_at = match op {
                    Op::Settle { at, .. } => Some(at),
                    _ => None,
                };
                let changed = self.adjust(tat, now, estimate, actual, charged_at);
                let mut view = *tat;
                Evaluation { changed, ..self.evaluate(&mut view, now, 1, false) }
            }
            Op::Peek | Op::Release { .. } | Op::Extend { .. } | Op::Abandon { .. } | Op::GiveBack { .. } => {
                self.evaluate(tat, now, 1, false)
            }
            Op::Take { cost, .. } => self.evaluate(tat, now, cost, true),
        }
    }

    /// Corrects a charge of `estimate` to `actual` (points limiter): the difference is charged,
    /// possibly beyond capacity (debt the bucket waits out, up to `max_ahead`), or refunded
    /// (never beyond full).
    ///
    /// A settle's refund (`charged_at`: the instant the call was charged, µs) gives back at most
    /// what of the call's charge time has not yet refilled: the call's tokens sit on the bucket's
    /// schedule no earlier than the call, so `estimate × T` after it they have all refilled,
    /// and a refund then would give them twice (others may have spent them since). Until then
    /// the part not yet refilled is still held by the bucket, and giving it back never admits
    /// more than had the call cost `actual`. `points_used` (no instant) is Sidekiq's unbounded
    /// correction, applied as it is told.
    pub(crate) fn adjust(
        &self,
        tat: &mut GcraState,
        now: u64,
        estimate: u64,
        actual: u64,
        charged_at: Option<u64>,
    ) -> bool {
        let used = self.used(*tat, now);
        let new_used = if actual >= estimate {
            let extra = u128::from(actual - estimate) * u128::from(self.emission);
            (u128::from(used) + extra).min(u128::from(self.max_ahead.max(used))) as u64
        } else {
            let mut back = (estimate - actual).saturating_mul(self.emission);
            if let Some(charged_at) = charged_at {
                back = back.min(self.unrefilled(estimate, charged_at, now));
            }
            used.saturating_sub(back)
        };
        if new_used == used {
            return false;
        }
        *tat = now.saturating_mul(NS_PER_US).saturating_add(new_used * self.tick_ns);
        true
    }

    /// Ticks of a charge of `cost` made at `charged_at` (µs) that time has not refilled by `now`,
    /// counting its refill from the instant it was charged.
    fn unrefilled(&self, cost: u64, charged_at: u64, now: u64) -> u64 {
        let elapsed_ns = now.saturating_sub(charged_at).saturating_mul(NS_PER_US);
        cost.saturating_mul(self.emission).saturating_sub(elapsed_ns / self.tick_ns)
    }
}

/// The exact time per unit of `units` earned in `period_us`, in ticks of `1/ticks_per_us` µs.
fn per_unit(period_us: u64, units: u64) -> impl Fn(u64) -> f64 {
    move |ticks_per_us| (period_us as f64 * ticks_per_us as f64) / units as f64
}

/// `gcra.lua`: applies the rule's write and returns the state it read.
pub(crate) static SCRIPT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::token_bucket("gcra", include_str!("gcra.lua")));

/// What `gcra.lua` returns: the state it read (whole microseconds, and nanoseconds within the
/// microsecond) and the instant it read it at.
struct Reply {
    tat_us: i64,
    tat_ns: i64,
    now: i64,
}

impl Reply {
    fn read(reply: &[i64]) -> Result<Reply> {
        match *reply {
            [tat_us, tat_ns, now] => Ok(Reply { tat_us, tat_ns, now }),
            _ => Err(malformed("GCRA", reply)),
        }
    }
}

impl Engine for Gcra {
    const SCRIPTS: &'static [&'static LazyLock<LuaScript>] = &[&SCRIPT];
    const COMBINED: Option<Combined> = Some(Combined { name: "gcra", lua: include_str!("gcra.lua"), cost_at: 4 });

    type State = GcraState;

    #[inline]
    fn apply(&self, tat: &mut GcraState, now: u64, op: Op, changed: &mut bool) -> Result<Outcome> {
        match op {
            Op::Check { .. } | Op::Peek | Op::Adjust { .. } | Op::Settle { .. } => {
                let mut e = self.run(tat, now, op);
                *changed = e.changed;
                e.decision.decided_at_micros = now;
                Ok(Outcome::of(e.decision))
            }
            _ => Err(not_applicable(op, self)),
        }
    }

    /// The instant at which the bucket is full again.
    #[inline]
    fn expires_at(&self, tat: &GcraState) -> u64 {
        tat.div_ceil(NS_PER_US)
    }

    fn keys(&self, _op: Op) -> &'static [&'static str] {
        &["s"]
    }

    fn state_keys(&self) -> &'static [&'static str] {
        &["s"]
    }

    /// `[tick_ns emission tau max_ahead actual] cost`: the spec and an adjustment's actual cost
    /// (0 for a check or a peek) packed into one argument ([`Packed`], read by one
    /// `cmsgpack.unpack`), then a check's cost or an adjustment's estimate (0 for a peek) on
    /// its own, where `check_all` puts the cost it decides at ([`Combined::cost_at`]); a settle
    /// adds the instant its call was charged.
    fn encode(&self, op: Op, _now: Option<u64>, cmd: &mut Cmd) -> Result<()> {
        let (first, second) = match op {
            Op::Check { cost, .. } => (cost, 0),
            Op::Adjust { estimate, actual } | Op::Settle { cost: estimate, actual, .. } => (estimate, actual),
            Op::Peek => (0, 0),
            _ => return Err(not_applicable(op, self)),
        };
        // Written straight into the command (no per-argument `String`s): the hot path.
        cmd.arg(Packed::of(&[self.tick_ns, self.emission, self.tau, self.max_ahead, second]).as_bytes()).arg(first);
        if let Op::Settle { at, .. } = op {
            cmd.arg(at);
        }
        Ok(())
    }

    /// The script applied the rule's write; the decision is the rule's own (see `gcra.lua`),
    /// replayed here on the state the script read.
    fn decode(&self, op: Op, reply: &[i64]) -> Result<Outcome> {
        let r = Reply::read(reply)?;
        let mut tat = (r.tat_us.max(0) as u64).saturating_mul(1000).saturating_add(r.tat_ns.clamp(0, 999) as u64);
        let now = r.now.max(0) as u64;
        let mut decision = self.run(&mut tat, now, op).decision;
        decision.decided_at_micros = now;
        Ok(Outcome::of(decision))
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn adjusts(&self) -> bool {
        true
    }
}

/// The `token_bucket` kind.
pub(crate) struct TokenBucketKind;

impl KindSpec for TokenBucketKind {
    /// `rate`, `capacity`.
    type Fields = (f64, u64);

    const SAMPLES: &'static [&'static str] = &[r#"{"kind":"token_bucket","rate":10,"capacity":20}"#];

    fn window((rate, capacity): &Self::Fields) -> Option<Duration> {
        // From empty to full.
        Duration::try_from_secs_f64(*capacity as f64 / rate).ok()
    }

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((json.number("rate")?, json.count("capacity")?))
    }

    fn words((rate, capacity): &Self::Fields) -> String {
        format!("{}, bursts of {}", words::rate(*rate), words::count(*capacity))
    }

    fn print(&(rate, capacity): &Self::Fields, json: &mut JsonWriter) {
        json.put("rate", number(rate));
        json.put("capacity", capacity.into());
    }

    fn scaled(&(rate, capacity): &Self::Fields, divisor: u64) -> Self::Fields {
        (rate / divisor as f64, share(capacity, divisor))
    }

    fn compile(&(rate, capacity): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Gcra(Gcra::token_bucket(rate, capacity)?))
    }
}

/// The `leaky` kind.
pub(crate) struct LeakyKind;

impl KindSpec for LeakyKind {
    /// `size`, `drain`.
    type Fields = (u64, Duration);

    const SAMPLES: &'static [&'static str] = &[r#"{"kind":"leaky","size":4,"drain":2}"#];

    fn window((_, drain): &Self::Fields) -> Option<Duration> {
        Some(*drain)
    }

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((json.count("size")?, json.seconds("drain")?))
    }

    fn words((size, drain): &Self::Fields) -> String {
        format!("bursts of {}, then 1 every {}", words::count(*size), words::duration(drain.div_f64(*size as f64)))
    }

    fn print(&(size, drain): &Self::Fields, json: &mut JsonWriter) {
        json.put("size", size.into());
        json.put("drain", secs(drain));
    }

    /// Keeps the drain time: a smaller bucket drains at a slower rate.
    fn scaled(&(size, drain): &Self::Fields, divisor: u64) -> Self::Fields {
        (share(size, divisor), drain)
    }

    fn compile(&(size, drain): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Gcra(Gcra::leaky(size, drain)?))
    }
}

/// The `points` kind.
pub(crate) struct PointsKind;

impl KindSpec for PointsKind {
    /// `capacity`, `refill`.
    type Fields = (u64, Duration);

    const SAMPLES: &'static [&'static str] = &[r#"{"kind":"points","capacity":1000,"refill":60}"#];

    fn window((_, refill): &Self::Fields) -> Option<Duration> {
        Some(*refill)
    }

    fn parse(_name: &str, json: &mut JsonFields<'_>) -> Result<Self::Fields> {
        Ok((json.count("capacity")?, json.seconds("refill")?))
    }

    fn words((capacity, refill): &Self::Fields) -> String {
        format!("{} points, refilled over {}", words::count(*capacity), words::duration(*refill))
    }

    fn print(&(capacity, refill): &Self::Fields, json: &mut JsonWriter) {
        json.put("capacity", capacity.into());
        json.put("refill", secs(refill));
    }

    /// Keeps the refill time: a smaller bucket refills at a slower rate.
    fn scaled(&(capacity, refill): &Self::Fields, divisor: u64) -> Self::Fields {
        (share(capacity, divisor), refill)
    }

    fn compile(&(capacity, refill): &Self::Fields) -> Result<Algorithm> {
        Ok(Algorithm::Gcra(Gcra::points(capacity, refill)?))
    }
}
