//! The process-local rule of a partitions limiter: pacing to the partitions held.
//!
//! Each held partition earns `rate` units per second from the moment its lease is granted until
//! its local deadline (which ends before the lease can be granted to anyone else, see
//! [`super::lease`]). Earned units are credit; a call of cost `c` is admitted when the credit
//! reaches `c`, and spends it. Credit is never spent before it is earned, so what a process
//! admits never exceeds what its partitions earned while it held them; as a partition is held by
//! one process at a time, the fleet never admits more than `total_rate` per second over the
//! whole run. The credit is capped at the cost of the call that reads it (at least 1), or 20 ms
//! of the held rate if that is more ([`CATCH_UP_US`]): an idle process does not bank a burst,
//! so calls of cost 1 are spaced `1 / held rate` apart (20 calls every 200 ms at 100 per second,
//! not 100 at once), and calls of cost 20 every 200 ms. In any span of `t` seconds the fleet
//! admits at most `total_rate * (t + 20 ms)` plus, per process, the credit it carried into the
//! span beyond that (at most the largest cost it asked for).

use crate::decision::Decision;

/// How much of its held rate a process may carry as credit beyond one call's cost: a caller
/// busy elsewhere for a moment (a round trip to the service it paces) catches up on up to 20 ms
/// of it instead of losing it.
pub(crate) const CATCH_UP_US: u64 = 20_000;

/// One held partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    /// Its index, `0..partitions`.
    pub index: u32,
    /// The fencing token of the grant: increases with every grant of any partition of the limiter.
    pub token: u64,
    /// The local instant (µs, the limiter's clock) its lease stops earning.
    pub deadline: u64,
}

/// A process's partitions and credit for one key.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    /// The partitions held, by index.
    pub held: Vec<Held>,
    /// Units earned and not yet spent.
    credit: f64,
    /// The instant (µs) credit was last brought up to date.
    accrued_at: u64,
}

impl Pacer {
    /// A pacer holding `held` from `now` (the memory backend's: every partition, for ever).
    pub(crate) fn holding(held: Vec<Held>, now: u64) -> Pacer {
        Pacer { held, credit: 0.0, accrued_at: now }
    }

    /// Adds what the held partitions earned (each at `rate` per second) up to `now`, capped at
    /// `cap`; drops the partitions whose deadline has passed.
    fn accrue(&mut self, now: u64, rate: f64, cap: f64) {
        if now > self.accrued_at {
            let since = self.accrued_at;
            let earned_us: u64 = self.held.iter().map(|h| h.deadline.min(now).saturating_sub(since)).sum();
            self.credit = (self.credit + rate * earned_us as f64 / 1e6).min(cap);
            self.accrued_at = now;
        } else {
            self.credit = self.credit.min(cap);
        }
        self.held.retain(|h| h.deadline > now);
    }

    /// Brings the credit up to `now` without spending (before the held set changes).
    pub(crate) fn catch_up(&mut self, now: u64, rate: f64) {
        self.accrue(now, rate, f64::INFINITY);
    }

    /// Replaces the held partitions at `now`: what the old ones earned until now is kept, the
    /// new ones earn from now.
    pub(crate) fn replace(&mut self, now: u64, rate: f64, held: Vec<Held>) {
        self.catch_up(now, rate);
        self.held = held;
    }

    /// Units per second the live partitions earn at `now`.
    pub(crate) fn held_rate(&self, now: u64, rate: f64) -> f64 {
        rate * self.held.iter().filter(|h| h.deadline > now).count() as f64
    }

    /// Decides a call of `cost` at `now` (spending when `commit`); `idle_retry_us` is the wait
    /// reported when nothing is held (until the next lease attempt).
    pub(crate) fn decide(&mut self, now: u64, rate: f64, cost: u64, commit: bool, idle_retry_us: u64) -> Decision {
        let held_rate = self.held_rate(now, rate);
        let cap = (cost.max(1) as f64).max(held_rate * CATCH_UP_US as f64 / 1e6);
        self.accrue(now, rate, cap);
        let held_rate = self.held_rate(now, rate);
        let limit = held_rate.floor() as u64;
        // Float sums of earned fractions may fall a hair short of a whole unit that was earned.
        let allowed = self.credit + 1e-9 >= cost as f64;
        if allowed && commit {
            self.credit = (self.credit - cost as f64).max(0.0);
        }
        let per_unit_us = |units: f64| {
            if held_rate > 0.0 {
                (units.max(0.0) * 1e6 / held_rate).ceil() as u64
            } else {
                idle_retry_us
            }
        };
        let retry_us = if allowed { 0 } else { per_unit_us(cost as f64 - self.credit).max(1) };
        let mut d = crate::engine::decision(
            allowed,
            limit,
            self.credit.floor() as u64,
            retry_us,
            per_unit_us(cap - self.credit),
        );
        d.decided_at_micros = now;
        d
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const FOREVER: u64 = u64::MAX;

    fn holding(n: u32, deadline: u64) -> Pacer {
        Pacer::holding((0..n).map(|index| Held { index, token: 1, deadline }).collect(), 0)
    }

    /// Admissions of cost-1 calls made as early as allowed over `span_us`, by a 1 µs scan.
    fn admitted_by(pacer: &mut Pacer, rate: f64, span_us: u64) -> Vec<u64> {
        let mut at = Vec::new();
        let mut now = 0;
        while now <= span_us {
            let d = pacer.decide(now, rate, 1, true, 1000);
            if d.allowed {
                at.push(now);
            } else {
                now += d.retry_after.as_micros() as u64;
                continue;
            }
        }
        at
    }

    #[test]
    fn calls_are_spaced_by_the_held_rate() {
        // 20 partitions of 5 per second: 100 per second, one call every 10 ms.
        let mut pacer = holding(20, FOREVER);
        let at = admitted_by(&mut pacer, 5.0, 1_000_000);
        assert_eq!(at.len(), 100, "{at:?}");
        assert!(at.windows(2).all(|w| w[1] - w[0] == 10_000), "{at:?}");
    }

    #[test]
    fn an_idle_pacer_banks_no_burst() {
        let mut pacer = holding(20, FOREVER);
        // 20 ms of 100 per second is carried after 5 s idle: 2 calls, then one per 10 ms.
        assert!(pacer.decide(5_000_000, 5.0, 1, true, 0).allowed);
        assert!(pacer.decide(5_000_000, 5.0, 1, true, 0).allowed);
        let refused = pacer.decide(5_000_000, 5.0, 1, true, 0);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, Duration::from_millis(10));
        // A batch of 20 is admitted after 200 ms of earning, not before.
        assert!(!pacer.decide(5_199_999, 5.0, 20, true, 0).allowed);
        assert!(pacer.decide(5_200_000, 5.0, 20, true, 0).allowed);
    }

    #[test]
    fn nothing_is_earned_past_a_deadline_nor_before_a_grant() {
        let mut pacer = holding(1, 1_000_000);
        let at = admitted_by(&mut pacer, 10.0, 3_000_000);
        assert_eq!(at.len(), 10, "{at:?}");
        assert!(at.iter().all(|&t| t <= 1_000_000), "{at:?}");
        pacer.replace(3_000_000, 10.0, vec![Held { index: 1, token: 2, deadline: FOREVER }]);
        let d = pacer.decide(3_000_000, 10.0, 1, true, 0);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Duration::from_millis(100));
    }

    #[test]
    fn holding_nothing_waits_for_the_next_lease() {
        let mut pacer = Pacer::default();
        let d = pacer.decide(7, 5.0, 1, true, 250_000);
        assert!(!d.allowed);
        assert_eq!(d.limit, 0);
        assert_eq!(d.retry_after, Duration::from_millis(250));
    }
}
