//! The fleet metrics flush is idempotent: a flush whose reply is lost (Redis ran it, the client
//! gave up waiting) is resent, and Redis applies it once.

use crate::support;

use std::time::Duration;

use ratekeeper::{Backend, RedisConfig};
use support::RedisServer;

/// `CLIENT PAUSE` holds the flush past its deadline; Redis runs it when the pause ends, after the
/// client has given up: the reply is lost, the counts landed. The next flush resends them.
#[test]
fn a_flush_whose_reply_was_lost_counts_once() {
    let server = RedisServer::start();
    let config = RedisConfig::new(server.url()).prefix("mflush").deadline(Duration::from_millis(200));
    let backend = Backend::redis_with(config).expect("a Redis backend");
    let limiter = backend.concurrent("m", 1000, Duration::from_secs(60)).unwrap();
    let mut granted = 0;
    let mut lost_flushes = 0;
    for round in 1..=3 {
        for _ in 0..round * 5 {
            assert!(limiter.check_blocking(None, 1).unwrap().allowed);
            granted += 1;
        }
        server.cli(&["CLIENT", "PAUSE", "500", "ALL"]);
        let lost = limiter.fleet_metrics_blocking();
        println!("round {round}: flush during the pause: {lost:?}");
        if lost.is_err() {
            lost_flushes += 1;
        }
        std::thread::sleep(Duration::from_millis(800));
        let fleet = limiter.fleet_metrics_blocking().expect("Redis answers again");
        println!("round {round}: granted {granted}, fleet {fleet:?}");
        assert_eq!(fleet.held, granted, "round {round}: a resent flush was counted twice");
        assert_eq!(fleet.immediate, granted, "round {round}");
    }
    assert!(lost_flushes > 0, "no flush lost its reply: the test did not test");
}
