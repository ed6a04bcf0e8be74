//! Calendar quotas on a real Redis server with no manual clock: the server's TIME picks the
//! period, among the boundaries the client computed around its own instant.

use crate::support;

use std::time::Duration;

use ratekeeper::{Backend, CalendarPeriod};
use support::RedisServer;

const DAY_US: u64 = 86_400_000_000;

/// The server's instant in microseconds.
fn server_now(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().unwrap());
    parts.next().unwrap() * 1_000_000 + parts.next().unwrap()
}

/// A UTC day decided by the server's clock ends exactly at the next UTC midnight of that clock,
/// and its key expires.
#[test]
fn the_server_clock_decides_and_reset_reaches_the_next_midnight() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(support::redis_config(server.url()).prefix("cal")).unwrap();
    let limiter = backend.calendar("daily", 2, CalendarPeriod::Day, "UTC", None).unwrap();
    let first = limiter.check_blocking(Some("u"), 1).unwrap();
    assert!(first.allowed);
    let now = first.decided_at_micros;
    let midnight = (now / DAY_US + 1) * DAY_US;
    assert_eq!(now + first.reset_after.as_micros() as u64, midnight);
    limiter.check_blocking(Some("u"), 1).unwrap();
    let refused = limiter.check_blocking(Some("u"), 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.decided_at_micros + refused.retry_after.as_micros() as u64, midnight);
    let keys = server.cli(&["KEYS", "cal:*"]);
    let key = keys.lines().next().expect("one key");
    let ttl: u64 = server.cli(&["PTTL", key]).parse().unwrap();
    assert!(ttl > 0 && ttl <= (midnight - now) / 1000 + 1_000 + 1, "{ttl}");
}

/// The script counts in the period that contains the server's instant, whether the client's
/// clock was a period ahead or behind; a client further off gets an error, not a wrong count.
#[test]
fn the_script_picks_the_servers_period_among_the_clients_boundaries() {
    let server = RedisServer::start();
    let (_, body) = ratekeeper::lua_sources().into_iter().find(|(name, _)| *name == "calendar").unwrap();
    let eval = |boundaries: [u64; 4]| {
        let b: Vec<String> = boundaries.iter().map(u64::to_string).collect();
        // A check passes the pause and block keys last (see `hold_check.lua`): "p" and "b", never
        // set here.
        server.cli(&["EVAL", body, "3", "k", "p", "b", "check", "", "1", "5", &b[0], &b[1], &b[2], &b[3]])
    };
    let today = server_now(&server) / DAY_US * DAY_US;
    // (A test running across midnight would see the next day: skip that instant.)
    if server_now(&server) + Duration::from_secs(5).as_micros() as u64 >= today + DAY_US {
        std::thread::sleep(Duration::from_secs(6));
        return;
    }
    let days = |from: u64| [from, from + DAY_US, from + 2 * DAY_US, from + 3 * DAY_US];
    // A client one day behind: its next period is the server's current one.
    let behind = eval(days(today - 2 * DAY_US));
    let lines: Vec<&str> = behind.lines().collect();
    assert_eq!(lines[1..], [(today + DAY_US).to_string().as_str(), "0"], "{behind}");
    // A client one day ahead: its previous period is the server's; the count is the same one.
    let ahead = eval(days(today));
    let lines: Vec<&str> = ahead.lines().collect();
    assert_eq!(lines[1..], [(today + DAY_US).to_string().as_str(), "1"], "{ahead}");
    // A client three days off.
    let far = eval(days(today + 3 * DAY_US));
    assert!(far.contains("clock"), "{far}");
    assert_eq!(server.cli(&["HGET", "k", "c"]), "2");
}
