//! GCRA (generic cell rate algorithm, "virtual scheduling"): the one engine behind the token
//! bucket, the leaky bucket and the points limiter. State is a single number, the theoretical
//! arrival time (TAT): the instant at which the bucket would be full again.
//!
//! With emission interval `T` (time to earn one unit) and tolerance `tau = capacity * T`, a call
//! of cost `c` at `now` is admitted iff `max(tat, now) + c*T - now <= tau`.

use super::{decision, Evaluation};
use crate::backend::Op;

/// GCRA parameters in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    /// Time to earn back one unit.
    pub emission_us: u64,
    /// `capacity * emission_us`: how far ahead of `now` the TAT may run.
    pub tau_us: u64,
    /// The burst size, reported as the decision's `limit`.
    pub capacity: u64,
}

/// Per-key state: the theoretical arrival time; 0 (or any past instant) is a full bucket.
pub(crate) type GcraState = u64;

impl Gcra {
    /// Evaluates a call of `cost` (or a peek when `commit` is false, which asks about cost 1).
    pub(crate) fn evaluate(&self, tat: &mut GcraState, now: u64, cost: u64, commit: bool) -> Evaluation {
        let used = tat.saturating_sub(now);
        let asked = if commit { cost } else { 1 };
        let after = used + asked * self.emission_us;
        // Cost 0 is always admitted (it records nothing), even when an overcharge reported through
        // `points_used` has pushed `used` beyond `tau`.
        let allowed = after <= self.tau_us || asked == 0;
        let available = self.tau_us.saturating_sub(used) / self.emission_us;
        if !allowed {
            let d = decision(false, self.capacity, available, after - self.tau_us, used);
            return Evaluation { decision: d, changed: false };
        }
        if !commit || cost == 0 {
            return Evaluation { decision: decision(true, self.capacity, available, 0, used), changed: false };
        }
        *tat = now + after;
        let remaining = (self.tau_us - after) / self.emission_us;
        Evaluation { decision: decision(true, self.capacity, remaining, 0, after), changed: true }
    }

    /// Runs `op` (a check, a peek, or an adjustment followed by a peek) on `tat` at `now`: the one
    /// dispatch from operations to this engine. The memory backend runs it on its state; the
    /// Redis backend replays it on the state its script read (the script made the same write).
    /// Release and extend do not apply to GCRA (the caller refuses them) and read as a peek.
    #[inline]
    pub(crate) fn run(&self, tat: &mut GcraState, now: u64, op: Op) -> Evaluation {
        match op {
            Op::Check { cost, .. } => self.evaluate(tat, now, cost, true),
            Op::Adjust { estimate, actual } => {
                let changed = self.adjust(tat, now, estimate, actual);
                let mut view = *tat;
                Evaluation { changed, ..self.evaluate(&mut view, now, 1, false) }
            }
            Op::Peek | Op::Release { .. } | Op::Extend { .. } | Op::Abandon { .. } => self.evaluate(tat, now, 1, false),
        }
    }

    /// Corrects a charge of `estimate` to `actual` (points limiter): the difference is charged
    /// (possibly beyond capacity, which then has to be waited out) or refunded (never beyond full).
    pub(crate) fn adjust(&self, tat: &mut GcraState, now: u64, estimate: u64, actual: u64) -> bool {
        let base = (*tat).max(now);
        let new_tat = if actual >= estimate {
            base + (actual - estimate) * self.emission_us
        } else {
            base.saturating_sub((estimate - actual) * self.emission_us).max(now)
        };
        let changed = new_tat != *tat && !(new_tat <= now && *tat <= now);
        *tat = new_tat;
        changed
    }

    /// The instant after which this state is indistinguishable from a full bucket.
    pub(crate) fn expires_at(&self, tat: &GcraState) -> u64 {
        *tat
    }
}
