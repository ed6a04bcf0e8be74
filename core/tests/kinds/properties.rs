//! Property tests: random sequences of calls against small, obviously-correct reference models,
//! one per engine. The models keep the full admission history and answer by brute force, so they
//! share no code or formulation with the engines. The memory backend must agree on every
//! decision field, which in particular means it never admits more than the model allows.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ratekeeper::{Backend, Clock, Decision, Limiter, ManualClock, MemoryConfig, SlidingLimit, WindowLimit};

const START: u64 = 1_700_000_000_123_456;

/// One step of a random sequence.
#[derive(Debug, Clone)]
struct Step {
    advance_us: u64,
    key: usize,
    cost: u64,
    peek: bool,
}

fn steps(max_advance: u64, max_cost: u64) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (0..=max_advance, 0..2usize, 0..=max_cost, prop::bool::weighted(0.15))
            .prop_map(|(advance_us, key, cost, peek)| Step { advance_us, key, cost, peek }),
        1..120,
    )
}

/// What the models predict.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expected {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_us: u64,
    reset_after_us: u64,
}

fn observed(d: &Decision) -> Expected {
    Expected {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        retry_after_us: d.retry_after.as_micros() as u64,
        reset_after_us: d.reset_after.as_micros() as u64,
    }
}

fn setup() -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    let backend = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap();
    (backend, clock)
}

/// A reference model of one key.
trait Model {
    fn decide(&mut self, now: u64, cost: u64, commit: bool) -> Expected;
}

fn run<M: Model>(
    limiter: &Limiter,
    clock: &ManualClock,
    models: &mut [M; 2],
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let keys = ["k0", "k1"];
    for (i, step) in steps.iter().enumerate() {
        clock.advance_micros(step.advance_us);
        let now = clock.now_micros();
        let key = Some(keys[step.key]);
        let (got, want) = if step.peek {
            (limiter.peek_blocking(key).unwrap(), models[step.key].decide(now, 1, false))
        } else {
            (limiter.check_blocking(key, step.cost).unwrap(), models[step.key].decide(now, step.cost, true))
        };
        prop_assert_eq!(observed(&got), want, "step {} ({:?}) at {}", i, step, now);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// GCRA as a leaky-bucket meter: `level` nanoseconds of work queued, draining 1000 per µs; the
// time per unit kept to the nanosecond, durations reported rounded up to the microsecond.

struct MeterModel {
    emission_ns: u64,
    capacity: u64,
    level: u64,
    at: u64,
}

impl Model for MeterModel {
    fn decide(&mut self, now: u64, cost: u64, commit: bool) -> Expected {
        let tau = self.capacity * self.emission_ns;
        let level = self.level.saturating_sub(now.saturating_sub(self.at) * 1000);
        let asked = if commit { cost } else { 1 };
        let fits = level + asked * self.emission_ns <= tau;
        let (level_after, remaining_level) = if fits && commit {
            (level + cost * self.emission_ns, level + cost * self.emission_ns)
        } else {
            (level, level)
        };
        if commit && fits {
            self.level = level_after;
            self.at = now;
        }
        Expected {
            allowed: fits,
            limit: self.capacity,
            remaining: (tau - remaining_level.min(tau)) / self.emission_ns,
            retry_after_us: if fits { 0 } else { (level + asked * self.emission_ns - tau).div_ceil(1000) },
            reset_after_us: remaining_level.div_ceil(1000),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Counting models: the full admission history, counted by brute force; retry_after found by
// trying every instant at which some admission stops counting.

/// One limit of a counting model: (limit, counts(admission_instant, now) -> bool,
/// expiry(admission_instant) -> instant).
type ModelLimit = (u64, Box<dyn Fn(u64, u64) -> bool>, Box<dyn Fn(u64) -> u64>);

struct HistoryModel {
    limits: Vec<ModelLimit>,
    admitted: Vec<(u64, u64)>,
}

impl HistoryModel {
    fn count(&self, index: usize, now: u64) -> u64 {
        let counts = &self.limits[index].1;
        self.admitted.iter().filter(|(t, _)| counts(*t, now)).map(|(_, c)| c).sum()
    }

    fn fits(&self, index: usize, now: u64, asked: u64) -> bool {
        self.count(index, now) + asked <= self.limits[index].0
    }
}

impl Model for HistoryModel {
    fn decide(&mut self, now: u64, cost: u64, commit: bool) -> Expected {
        let asked = if commit { cost } else { 1 };
        let n = self.limits.len();
        let allowed = (0..n).all(|i| self.fits(i, now, asked));
        if allowed && commit && cost > 0 {
            self.admitted.push((now, cost));
        }
        let mut best: Option<(u64, u64)> = None; // (remaining, limit)
        let (mut retry, mut reset) = (0, 0);
        for i in 0..n {
            let limit = self.limits[i].0;
            let remaining = limit - self.count(i, now).min(limit);
            if best.is_none() || best.is_some_and(|(r, _)| remaining < r) {
                best = Some((remaining, limit));
            }
            let expiry = &self.limits[i].2;
            let live: Vec<u64> =
                self.admitted.iter().filter(|(t, _)| (self.limits[i].1)(*t, now)).map(|(t, _)| expiry(*t)).collect();
            reset = reset.max(live.iter().max().map_or(0, |e| e - now));
            if !allowed && !self.fits(i, now, asked) {
                let mut candidates = live.clone();
                candidates.sort();
                let at = candidates.into_iter().find(|&t| self.fits(i, t, asked)).expect("some instant frees enough");
                retry = retry.max(at - now);
            }
        }
        let (remaining, limit) = best.unwrap();
        Expected { allowed, limit, remaining, retry_after_us: retry, reset_after_us: reset }
    }
}

fn exact_window(limit: u64, interval: u64) -> ModelLimit {
    (limit, Box::new(move |t, now| now < t + interval), Box::new(move |t| t + interval))
}

fn blocks_window(limit: u64, duration: u64, precision: u64) -> ModelLimit {
    let p = precision.min(duration);
    let blocks = duration.div_ceil(p);
    (limit, Box::new(move |t, now| now / p < t / p + blocks), Box::new(move |t| (t / p + blocks) * p))
}

fn history(limits: Vec<ModelLimit>) -> HistoryModel {
    HistoryModel { limits, admitted: Vec::new() }
}

// ---------------------------------------------------------------------------------------------
// Concurrent: a list of holders; overdue holders are reclaimed only when their slot is needed.

struct ConcurrentModel {
    limit: u64,
    lock_us: u64,
    holders: Vec<u64>,
    last_token: u64,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_matches_meter_model(rate in 1u32..50, capacity in 1u64..8, seq in steps(400_000, 8)) {
        let (backend, clock) = setup();
        let limiter = backend.token_bucket("tb", rate as f64, capacity).unwrap();
        let emission_ns = (1e9 / rate as f64).round() as u64;
        let mk = || MeterModel { emission_ns, capacity, level: 0, at: START };
        let seq: Vec<Step> = seq.into_iter().map(|s| Step { cost: s.cost.min(capacity), ..s }).collect();
        run(&limiter, &clock, &mut [mk(), mk()], &seq)?;
    }

    #[test]
    fn leaky_and_points_match_meter_model(size in 1u64..10, drain_ms in 1u64..2_000, seq in steps(300_000, 10)) {
        let (backend, clock) = setup();
        let drain_us = drain_ms * 1000;
        let emission_ns = (drain_us * 1000 + size / 2) / size;
        for limiter in [backend.leaky("lk", size, Duration::from_micros(drain_us)).unwrap(), backend.points("pt", size, Duration::from_micros(drain_us)).unwrap()] {
            let mk = || MeterModel { emission_ns, capacity: size, level: 0, at: clock.now_micros() };
            let seq: Vec<Step> = seq.iter().map(|s| Step { cost: s.cost.min(size), ..s.clone() }).collect();
            // The second limiter's models start where the first run left the clock.
            run(&limiter, &clock, &mut [mk(), mk()], &seq)?;
        }
    }

    #[test]
    fn bucket_matches_history_model(limit in 1u64..10, interval_ms in 1u64..1_500, seq in steps(600_000, 10)) {
        let (backend, clock) = setup();
        let interval = interval_ms * 1000;
        let limiter = backend.bucket("bk", limit, Duration::from_micros(interval)).unwrap();
        let mk = || history(vec![blocks_window(limit, interval, interval)]);
        let seq: Vec<Step> = seq.into_iter().map(|s| Step { cost: s.cost.min(limit), ..s }).collect();
        run(&limiter, &clock, &mut [mk(), mk()], &seq)?;
    }

    #[test]
    fn sliding_window_matches_history_model(
        l1 in 1u64..12, d1 in 10u64..1_000, p1 in 1u64..1_000,
        l2 in 1u64..30, d2 in 10u64..3_000, p2 in prop::option::of(1u64..3_000),
        seq in steps(500_000, 12),
    ) {
        let (backend, clock) = setup();
        let ms = |v: u64| Duration::from_millis(v);
        let limiter = backend.sliding_window("sw", &[
            SlidingLimit { duration: ms(d1), limit: l1, precision: Some(ms(p1)) },
            SlidingLimit { duration: ms(d2), limit: l2, precision: p2.map(ms) },
        ]).unwrap();
        let mk = || history(vec![blocks_window(l1, d1 * 1000, p1 * 1000), blocks_window(l2, d2 * 1000, p2.unwrap_or(d2) * 1000)]);
        let smallest = l1.min(l2);
        let seq: Vec<Step> = seq.into_iter().map(|s| Step { cost: s.cost.min(smallest), ..s }).collect();
        run(&limiter, &clock, &mut [mk(), mk()], &seq)?;
    }

    #[test]
    fn windows_match_history_model(l1 in 1u64..8, i1 in 1u64..800, l2 in 1u64..20, i2 in 1u64..3_000, seq in steps(400_000, 8)) {
        let (backend, clock) = setup();
        let limiter = backend.windows("wn", &[
            WindowLimit { limit: l1, interval: Duration::from_millis(i1) },
            WindowLimit { limit: l2, interval: Duration::from_millis(i2) },
        ]).unwrap();
        let mk = || history(vec![exact_window(l1, i1 * 1000), exact_window(l2, i2 * 1000)]);
        let smallest = l1.min(l2);
        let seq: Vec<Step> = seq.into_iter().map(|s| Step { cost: s.cost.min(smallest), ..s }).collect();
        run(&limiter, &clock, &mut [mk(), mk()], &seq)?;
    }

    #[test]
    fn window_never_admits_more_than_limit_in_any_span(limit in 1u64..10, interval_ms in 1u64..500, seq in steps(200_000, 4)) {
        let (backend, clock) = setup();
        let interval = interval_ms * 1000;
        let limiter = backend.window("span", limit, Duration::from_micros(interval)).unwrap();
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut now = START;
        for step in &seq {
            clock.advance_micros(step.advance_us);
            now += step.advance_us;
            let cost = step.cost.min(limit);
            if limiter.check_blocking(None, cost).unwrap().allowed && cost > 0 {
                admitted.push((now, cost));
            }
        }
        for &(start, _) in &admitted {
            let in_span: u64 = admitted.iter().filter(|(t, _)| *t >= start && *t < start + interval).map(|(_, c)| c).sum();
            prop_assert!(in_span <= limit, "{} admitted in the span starting at {}", in_span, start);
        }
    }

    #[test]
    fn concurrent_matches_holder_model(limit in 1u64..5, lock_ms in 1u64..500, ops in prop::collection::vec((0u64..300_000, prop::bool::ANY, 0usize..8), 1..120)) {
        let (backend, clock) = setup();
        let lock_us = lock_ms * 1000;
        let limiter = backend.concurrent("cc", limit, Duration::from_micros(lock_us)).unwrap();
        let mut model = ConcurrentModel { limit, lock_us, holders: Vec::new(), last_token: 0 };
        let mut leases = Vec::new(); // (lease, expiry in the model, still held in the model)
        let mut now = START;
        for (advance, acquire, pick) in ops {
            clock.advance_micros(advance);
            now += advance;
            if acquire || leases.is_empty() {
                let got = limiter.check_blocking(None, 1).unwrap();
                let live = model.holders.iter().filter(|e| **e > now).count() as u64;
                if live < model.limit {
                    if model.holders.len() as u64 >= model.limit {
                        model.holders.retain(|e| *e > now);
                        for l in leases.iter_mut() { let l: &mut (ratekeeper::Lease, u64, bool) = l; if l.1 <= now { l.2 = false; } }
                    }
                    let token = (model.last_token + 1).max(now);
                    model.last_token = token;
                    model.holders.push(now + model.lock_us);
                    prop_assert!(got.allowed);
                    prop_assert_eq!(got.remaining, model.limit - live - 1);
                    let lease = got.lease.unwrap();
                    prop_assert_eq!(lease.fencing_token, token);
                    leases.push((lease, now + model.lock_us, true));
                } else {
                    prop_assert!(!got.allowed);
                    prop_assert_eq!(got.retry_after.as_micros() as u64, model.holders.iter().min().unwrap() - now);
                }
            } else {
                let index = pick % leases.len();
                let (lease, expiry, held) = leases.remove(index);
                let result = limiter.release_blocking(None, &lease);
                if held {
                    prop_assert!(result.is_ok(), "release of a held lease failed: {:?}", result);
                    let pos = model.holders.iter().position(|e| *e == expiry).unwrap();
                    model.holders.swap_remove(pos);
                } else {
                    prop_assert_eq!(result.unwrap_err().kind(), ratekeeper::ErrorKind::LeaseLost);
                }
            }
            let live = model.holders.iter().filter(|e| **e > now).count() as u64;
            prop_assert!(live <= limit);
        }
    }
}
