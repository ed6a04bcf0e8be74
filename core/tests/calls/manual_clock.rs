//! A Redis backend on a manual clock (the vector runners of every language, tests of users'
//! own code): the state a script writes lives as long as the manual clock says, however much
//! real time passes between two calls. The scripts set each key's TTL from its manual-clock
//! lifetime; only real time expires keys, so that TTL needs more slack than the second that
//! covers the server's own clock.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, ManualClock, RedisConfig};
use support::RedisServer;

const START: u64 = 1_800_000_000_000_000;

/// One spec per script, each with a state that lives one second of manual time.
const SPECS: &[&str] = &[
    r#"{"kind":"token_bucket","rate":1,"capacity":1}"#,
    r#"{"kind":"window","limit":1,"interval":1}"#,
    r#"{"kind":"windows","windows":[[1,1],[5,10]]}"#,
    r#"{"kind":"sliding_window","limits":[[1,1]]}"#,
    r#"{"kind":"bucket","limit":1,"interval":1}"#,
    r#"{"kind":"leaky","size":1,"drain":1}"#,
    r#"{"kind":"points","capacity":1,"refill":1}"#,
    r#"{"kind":"concurrent","limit":1,"lock_timeout":1}"#,
];

/// Every limiter is spent on the manual clock, then 2.5 s of real time pass with the manual
/// clock still: every limiter still refuses (the state expired after a real second and a bit,
/// and the next call was admitted).
#[test]
fn manual_clock_state_survives_a_real_stall() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START);
    let config = RedisConfig::new(server.url()).deadline(Duration::from_secs(10)).clock(Arc::new(clock));
    let backend = Backend::redis_with(config).unwrap();
    let limiters: Vec<_> =
        SPECS.iter().enumerate().map(|(i, spec)| backend.limiter_from_json(&format!("l{i}"), spec).unwrap()).collect();
    let mut leases = Vec::new();
    for (limiter, spec) in limiters.iter().zip(SPECS) {
        let first = limiter.check_blocking(Some("k"), 1).unwrap();
        assert!(first.allowed, "{spec}");
        leases.extend(first.lease);
        assert!(!limiter.check_blocking(Some("k"), 1).unwrap().allowed, "{spec}: spent");
    }
    std::thread::sleep(Duration::from_millis(2_500));
    let admitted: Vec<_> = limiters
        .iter()
        .zip(SPECS)
        .filter(|(limiter, _)| limiter.check_blocking(Some("k"), 1).unwrap().allowed)
        .map(|(_, spec)| *spec)
        .collect();
    assert!(admitted.is_empty(), "admitted after a real stall with the manual clock still: {admitted:?}");
    drop(leases);
}
