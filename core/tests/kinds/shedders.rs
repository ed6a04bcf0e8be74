//! The load shedders: the utilization curve under a manual clock (Stripe's timings), priorities,
//! and the fleet shedder's slots; both refuse with `Shed`, never over-limit.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, ErrorKind, ManualClock, UtilizationConfig, UtilizationShedder};

const START: u64 = 1_800_000_000_000_000;

/// Feeds `utilization` once a second (a sampler) for `seconds`.
fn hold(shedder: &UtilizationShedder, clock: &ManualClock, utilization: f64, seconds: u64) {
    for _ in 0..seconds {
        clock.advance(Duration::from_secs(1));
        shedder.observe(utilization).unwrap();
    }
}

fn shedder() -> (UtilizationShedder, ManualClock) {
    let clock = ManualClock::new(START);
    let shedder = UtilizationShedder::new(UtilizationConfig::default(), Arc::new(clock.clone())).unwrap();
    (shedder, clock)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn full_pressure_starts_shedding_after_28_s_and_reaches_everything_120_s_later() {
    let (s, clock) = shedder();
    s.observe(1.0).unwrap();
    hold(&s, &clock, 1.0, 27);
    assert_eq!(s.shedding(), 0.0, "nothing is shed during the first 28 s");
    assert_eq!(s.drop_chance(3).unwrap(), 0.0);
    hold(&s, &clock, 1.0, 2); // t = 29 s
    assert!(s.shedding() > 0.0, "shedding has started by 29 s");
    hold(&s, &clock, 1.0, 39); // t = 68 s: 40 s of shedding = a third of the way
    assert!(close(s.shedding(), 40.0 / 120.0), "{}", s.shedding());
    assert!(close(s.drop_chance(3).unwrap(), 1.0), "the least important level goes first, entirely");
    assert_eq!(s.drop_chance(2).unwrap(), 0.0, "the next level starts only after it");
    hold(&s, &clock, 1.0, 40); // t = 108 s: two thirds
    assert!(close(s.drop_chance(2).unwrap(), 1.0));
    assert!(close(s.drop_chance(1).unwrap(), 0.0));
    hold(&s, &clock, 1.0, 20); // t = 128 s
    assert!(close(s.drop_chance(1).unwrap(), 0.5));
    hold(&s, &clock, 1.0, 20); // t = 148 s = 28 + 120
    for level in 1..=3 {
        assert!(close(s.drop_chance(level).unwrap(), 1.0), "level {level} fully shed at 148 s");
        assert_eq!(s.check(level).unwrap_err().kind(), ErrorKind::Shed);
    }
    assert_eq!(s.drop_chance(0).unwrap(), 0.0);
    for _ in 0..1_000 {
        s.check(0).expect("critical traffic is never shed");
    }
}

#[test]
fn the_dead_zone_changes_nothing_and_recovery_is_slow() {
    let (s, clock) = shedder();
    s.observe(0.75).unwrap();
    hold(&s, &clock, 0.75, 600);
    assert_eq!(s.shedding(), 0.0, "0.7..0.8 is a dead zone");
    hold(&s, &clock, 1.0, 148);
    assert!(close(s.shedding(), 1.0));
    hold(&s, &clock, 0.75, 300);
    assert!(close(s.shedding(), 1.0), "the dead zone holds the current amount too");
    hold(&s, &clock, 0.0, 60); // idle: shedding falls at 1/120 per second
    assert!(close(s.shedding(), 0.5), "{}", s.shedding());
    hold(&s, &clock, 0.35, 60); // half-way to good: half the speed
    assert!(close(s.shedding(), 0.25), "{}", s.shedding());
}

#[test]
fn partial_pressure_sheds_proportionally_and_draws_match_the_chance() {
    let (s, clock) = shedder();
    s.observe(0.9).unwrap(); // half-way into "bad": half the speed
    hold(&s, &clock, 0.9, 55);
    assert_eq!(s.shedding(), 0.0, "at half pressure, shedding starts after 56 s");
    hold(&s, &clock, 0.9, 2);
    assert!(s.shedding() > 0.0, "at half pressure, shedding has started by 57 s");
    hold(&s, &clock, 0.9, 39); // 20 s worth of full-pressure shedding
    let chance = s.drop_chance(3).unwrap();
    assert!(close(chance, 0.5), "{chance}");
    let dropped = (0..20_000).filter(|_| s.check(3).is_err()).count();
    assert!((9_000..=11_000).contains(&dropped), "dropped {dropped} of 20,000 at chance 0.5");
}

#[test]
fn bad_signals_and_configurations_are_invalid_arguments() {
    let (s, _clock) = shedder();
    for bad in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
        assert_eq!(s.observe(bad).unwrap_err().parameter(), Some("utilization"));
    }
    assert_eq!(s.drop_chance(4).unwrap_err().parameter(), Some("priority"));
    let clock = Arc::new(ManualClock::new(START));
    let mut config = UtilizationConfig::default();
    config.levels = 0;
    assert_eq!(UtilizationShedder::new(config, clock.clone()).unwrap_err().parameter(), Some("levels"));
    let mut config = UtilizationConfig::default();
    config.start_of_bad = 0.5;
    assert_eq!(UtilizationShedder::new(config, clock).unwrap_err().parameter(), Some("start_of_bad"));
}

#[test]
fn fleet_shedder_sheds_non_critical_traffic_beyond_its_slots() {
    let backend = Backend::memory();
    let fleet = ratekeeper::FleetShedder::new(&backend, "fleet", 2, Duration::from_secs(30)).unwrap();
    let a = fleet.enter_blocking(false).unwrap();
    let b = fleet.enter_blocking(false).unwrap();
    let err = fleet.enter_blocking(false).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Shed);
    assert!(!err.is_over_limit());
    for _ in 0..100 {
        assert_eq!(fleet.enter_blocking(true).unwrap(), None, "critical traffic bypasses the slots");
    }
    fleet.leave_blocking(a).unwrap();
    let c = fleet.enter_blocking(false).unwrap();
    assert!(c.is_some());
    fleet.leave_blocking(b).unwrap();
    fleet.leave_blocking(c).unwrap();
}
