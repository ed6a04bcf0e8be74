//! The counting limiters (Carlson's sliding window, the fixed-window bucket, the exact sliding
//! window) on a real Redis server and on the memory backend, with a manual clock:
//! - a window of many sub-buckets keeps answering after a pause longer than the window, and a
//!   call's reply does not grow with the number of sub-buckets (issue 13, item 1);
//! - limiters that share a name but not a configuration (a rolling deploy) decide with their own
//!   configuration and never destroy each other's counts; the mismatch is counted in
//!   [`ratekeeper::BackendStats::config_mismatches`] (item 14). GCRA and concurrent limiters are
//!   checked too.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, ManualClock, MemoryConfig, RedisConfig, SlidingLimit};
use support::RedisServer;

const START: u64 = 1_800_000_000_000_000;
const SECOND: Duration = Duration::from_secs(1);

fn redis(server: &RedisServer, clock: &Arc<ManualClock>) -> Backend {
    static CASE: AtomicU32 = AtomicU32::new(0);
    let prefix = format!("counting{}", CASE.fetch_add(1, Ordering::Relaxed));
    let config = RedisConfig::new(server.url()).prefix(prefix).deadline(Duration::from_secs(10)).clock(clock.clone());
    Backend::redis_with(config).expect("a Redis backend")
}

fn memory(clock: &Arc<ManualClock>) -> Backend {
    Backend::memory_with(MemoryConfig::default().clock(clock.clone())).expect("a memory backend")
}

fn sliding(duration: Duration, limit: u64, precision: Duration) -> SlidingLimit {
    SlidingLimit { duration, limit, precision: Some(precision) }
}

/// Bytes the server has written to all its clients so far.
fn net_output(server: &RedisServer) -> i64 {
    let info = server.cli(&["INFO", "stats"]);
    let line = info.lines().find(|l| l.starts_with("total_net_output_bytes:")).expect("INFO stats");
    line.trim_start_matches("total_net_output_bytes:").trim().parse().unwrap()
}

/// The bytes of the reply to `call`, from the server's output counter (an `INFO stats` reply,
/// which `net_output` itself causes, is measured alongside and subtracted).
fn reply_bytes(server: &RedisServer, call: impl FnOnce()) -> i64 {
    let a = net_output(server);
    let b = net_output(server);
    call();
    let c = net_output(server);
    (c - b) - (b - a)
}

/// Every Redis key of limiter `name`, with its PTTL in milliseconds.
fn keys_with_ttl(server: &RedisServer, name: &str) -> Vec<(String, i64)> {
    let keys = server.cli(&["--scan", "--pattern", &format!("*:{name}:*")]);
    keys.lines().map(|k| (k.to_owned(), server.cli(&["PTTL", k]).parse().unwrap())).collect()
}

#[test]
fn a_pause_longer_than_the_window_after_many_sub_buckets_keeps_answering() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let backend = redis(&server, &clock);
    let hour = Duration::from_secs(3600);
    let limiter =
        backend.sliding_window("busy", &[sliding(hour, 1_000_000, Duration::from_millis(100))]).expect("a limiter");
    // Steady traffic: one admitted call per 0.1 s sub-bucket, 8,500 of them.
    for i in 0..8_500 {
        if i > 0 {
            clock.advance(Duration::from_millis(100));
        }
        assert!(limiter.check_blocking(Some("k"), 1).expect("a check while filling").allowed);
    }
    assert_eq!(limiter.peek_blocking(Some("k")).unwrap().remaining, 1_000_000 - 8_500);
    // Then a pause longer than the window: every sub-bucket is stale.
    clock.advance(hour + SECOND);
    for call in 0..5 {
        let d = limiter.check_blocking(Some("k"), 1).unwrap_or_else(|e| panic!("call {call} after the pause: {e}"));
        assert!(d.allowed);
        assert_eq!(d.remaining, 1_000_000 - 1 - call);
        assert_eq!(d.reset_after, hour, "one sub-bucket counts, the current one");
    }
    // Stale sub-buckets go in bounded chunks: a few hundred calls later, none is left.
    for _ in 0..100 {
        limiter.check_blocking(Some("k"), 1).unwrap();
    }
    for (key, ttl) in keys_with_ttl(&server, "busy") {
        assert!(ttl > 0, "{key} has no TTL");
        if server.cli(&["TYPE", &key]) == "zset" {
            assert_eq!(server.cli(&["ZCARD", &key]), "1", "{key}: only the current sub-bucket is left");
        }
    }
}

#[test]
fn a_reply_does_not_grow_with_the_sub_buckets() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let backend = redis(&server, &clock);
    let limiter = backend.sliding_window("wide", &[sliding(Duration::from_secs(3600), 3_600, SECOND)]).unwrap();
    let first = reply_bytes(&server, || assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed));
    for _ in 1..3_599 {
        clock.advance(SECOND);
        assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    }
    clock.advance(SECOND);
    // 3,600 non-empty sub-buckets: the last admitted call, a refused one, a peek.
    let admitted = reply_bytes(&server, || assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed));
    let refused = reply_bytes(&server, || {
        let d = limiter.check_blocking(Some("k"), 2).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Duration::from_secs(2), "the two oldest sub-buckets must leave");
    });
    let peek = reply_bytes(&server, || assert_eq!(limiter.peek_blocking(Some("k")).unwrap().remaining, 0));
    for (what, bytes) in [("first", first), ("admitted", admitted), ("refused", refused), ("peek", peek)] {
        assert!(bytes < 200, "{what}: a reply of {bytes} bytes (first call: {first})");
    }
}

/// Two `sliding_window` limiters named alike, 60 s and 3,600 s, used alternately: the longer
/// one's counts survive the shorter one's calls, and each decides with its own limits.
fn sliding_configurations_keep_each_others_counts(backend: &Backend, clock: &ManualClock) {
    let short = backend.sliding_window("shared", &[sliding(Duration::from_secs(60), 100, SECOND)]).unwrap();
    let long =
        backend.sliding_window("shared", &[sliding(Duration::from_secs(3600), 100, Duration::from_secs(60))]).unwrap();
    let before = backend.stats().config_mismatches;
    for _ in 0..5 {
        assert!(long.check_blocking(Some("k"), 1).unwrap().allowed);
    }
    for _ in 0..10 {
        clock.advance(Duration::from_secs(30));
        assert!(short.check_blocking(Some("k"), 1).unwrap().allowed);
        assert!(backend.stats().config_mismatches > before, "a call on another configuration's state is counted");
    }
    assert_eq!(long.peek_blocking(Some("k")).unwrap().remaining, 95, "the long window's counts survive");
    assert_eq!(short.peek_blocking(Some("k")).unwrap().remaining, 98, "the short window counts its own calls");
    assert!(long.check_blocking(Some("k"), 1).unwrap().allowed);
    assert_eq!(long.peek_blocking(Some("k")).unwrap().remaining, 94);
}

#[test]
fn sliding_configurations_of_one_name_keep_each_others_counts_on_memory() {
    let clock = Arc::new(ManualClock::new(START));
    sliding_configurations_keep_each_others_counts(&memory(&clock), &clock);
}

#[test]
fn sliding_configurations_of_one_name_keep_each_others_counts_on_redis() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let backend = redis(&server, &clock);
    sliding_configurations_keep_each_others_counts(&backend, &clock);
    // The shorter window's writes (the last one opens a sub-bucket) never shorten the TTL the
    // longer window's counts need.
    clock.advance(Duration::from_secs(30));
    let short = backend.sliding_window("shared", &[sliding(Duration::from_secs(60), 100, SECOND)]).unwrap();
    assert!(short.check_blocking(Some("k"), 1).unwrap().allowed);
    let keys = keys_with_ttl(&server, "shared");
    assert!(!keys.is_empty());
    for (key, ttl) in keys {
        assert!(ttl > 3_000_000, "{key} expires in {ttl} ms: before the 3,600 s window's counts do");
    }
}

/// Two exact `window` limiters named alike, 60 s and 3,600 s, used alternately: both count the
/// one shared log of admissions, and the shorter one's trim keeps what the longer one counts.
fn windows_keep_each_others_counts(backend: &Backend, clock: &ManualClock) {
    let short = backend.window("log", 100, Duration::from_secs(60)).unwrap();
    let long = backend.window("log", 100, Duration::from_secs(3600)).unwrap();
    let before = backend.stats().config_mismatches;
    for _ in 0..5 {
        assert!(long.check_blocking(Some("k"), 1).unwrap().allowed);
    }
    for _ in 0..10 {
        clock.advance(Duration::from_secs(30));
        assert!(short.check_blocking(Some("k"), 1).unwrap().allowed);
    }
    assert!(backend.stats().config_mismatches > before, "a call on another configuration's state is counted");
    assert_eq!(long.peek_blocking(Some("k")).unwrap().remaining, 85, "the long window counts all 15 admissions");
    assert_eq!(short.peek_blocking(Some("k")).unwrap().remaining, 98, "the short window counts the last minute");
}

#[test]
fn windows_of_one_name_keep_each_others_counts_on_memory() {
    let clock = Arc::new(ManualClock::new(START));
    windows_keep_each_others_counts(&memory(&clock), &clock);
}

#[test]
fn windows_of_one_name_keep_each_others_counts_on_redis() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let backend = redis(&server, &clock);
    windows_keep_each_others_counts(&backend, &clock);
    for (key, ttl) in keys_with_ttl(&server, "log") {
        assert!(ttl > 3_000_000, "{key} expires in {ttl} ms: before the 3,600 s window's counts do");
    }
}

/// GCRA and concurrent limiters named alike with other parameters: not affected. The GCRA state
/// (one instant) means the same to every configuration and its TTL is when it empties, whatever
/// the configuration; a concurrent lease's expiry is set by the configuration that granted it
/// and the TTL follows the latest lease.
fn gcra_and_concurrent_keep_each_others_state(backend: &Backend, clock: &ManualClock) {
    let slow = backend.token_bucket("tb", 1.0, 10).unwrap();
    let fast = backend.token_bucket("tb", 100.0, 10).unwrap();
    assert!(slow.check_blocking(Some("k"), 10).unwrap().allowed);
    let refused = slow.check_blocking(Some("k"), 1).unwrap();
    assert!(!refused.allowed);
    assert!(!fast.check_blocking(Some("k"), 1).unwrap().allowed, "the shared state is full for both");
    clock.advance(Duration::from_millis(500));
    let later = slow.check_blocking(Some("k"), 1).unwrap();
    assert_eq!(later.retry_after, refused.retry_after - Duration::from_millis(500), "nothing was lost");

    let wide = backend.concurrent("cc", 3, Duration::from_secs(3600)).unwrap();
    let narrow = backend.concurrent("cc", 1, Duration::from_secs(1)).unwrap();
    let held = wide.check_blocking(Some("k"), 1).unwrap();
    assert!(held.allowed);
    clock.advance(Duration::from_secs(2));
    assert!(!narrow.check_blocking(Some("k"), 1).unwrap().allowed, "the wide lease still counts for the narrow");
    assert!(wide.release_blocking(Some("k"), &held.lease.unwrap()).is_ok(), "the wide lease was not reclaimed");
}

#[test]
fn gcra_and_concurrent_configurations_of_one_name_are_not_affected_on_memory() {
    let clock = Arc::new(ManualClock::new(START));
    gcra_and_concurrent_keep_each_others_state(&memory(&clock), &clock);
}

#[test]
fn gcra_and_concurrent_configurations_of_one_name_are_not_affected_on_redis() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let backend = redis(&server, &clock);
    gcra_and_concurrent_keep_each_others_state(&backend, &clock);
    for (key, ttl) in keys_with_ttl(&server, "tb").into_iter().chain(keys_with_ttl(&server, "cc")) {
        assert!(ttl > 0, "{key} has no TTL");
    }
    for (key, ttl) in keys_with_ttl(&server, "cc") {
        if server.cli(&["TYPE", &key]) == "zset" {
            assert!(ttl > 3_000_000, "{key} expires in {ttl} ms: before the 3,600 s lease does");
        }
    }
}

/// xorshift64*: deterministic per seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// The Redis script and the memory backend give the very same decisions (every figure, every
/// limit) over a long random run: steady traffic over 1,000 sub-buckets, pauses that leave
/// more stale sub-buckets than one call deletes, pauses longer than every window, peeks,
/// weighted costs, refusals. The memory backend is checked against a model in properties.rs.
#[test]
fn redis_decides_exactly_as_memory_over_a_random_run() {
    let server = RedisServer::start();
    let limits = [
        sliding(Duration::from_secs(10), 60, Duration::from_millis(10)),
        sliding(Duration::from_secs(2), 25, Duration::from_millis(500)),
        SlidingLimit { duration: SECOND, limit: 9, precision: None },
    ];
    let clock = Arc::new(ManualClock::new(START + 3_456));
    let on_redis = redis(&server, &clock).sliding_window("random", &limits).unwrap();
    let on_memory = memory(&clock).sliding_window("random", &limits).unwrap();
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    for step in 0..4_000 {
        let advance = match rng.below(100) {
            0 => 10_000_000 + rng.below(3_000_000),
            1..=2 => 2_000_000 + rng.below(4_000_000),
            _ => rng.below(40_000),
        };
        clock.advance_micros(advance);
        let (r, m) = if rng.below(10) == 0 {
            (on_redis.peek_blocking(Some("k")).unwrap(), on_memory.peek_blocking(Some("k")).unwrap())
        } else {
            let cost = rng.below(5);
            (on_redis.check_blocking(Some("k"), cost).unwrap(), on_memory.check_blocking(Some("k"), cost).unwrap())
        };
        assert_eq!(
            (r.allowed, r.limit, r.remaining, r.retry_after, r.reset_after, &r.limits),
            (m.allowed, m.limit, m.remaining, m.retry_after, m.reset_after, &m.limits),
            "step {step}: Redis (left) and memory (right) differ"
        );
    }
}

/// The hash of limiter `name` (its one key of type hash) and its fields.
fn stored_hash(conn: &mut redis::Connection, name: &str) -> (String, std::collections::HashMap<String, String>) {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("*:{name}:*")).query(conn).unwrap();
    let hashes: Vec<String> =
        keys.into_iter().filter(|k| redis::cmd("TYPE").arg(k).query::<String>(conn).unwrap() == "hash").collect();
    assert_eq!(hashes.len(), 1, "one hash: {hashes:?}");
    let fields = redis::cmd("HGETALL").arg(&hashes[0]).query(conn).unwrap();
    (hashes[0].clone(), fields)
}

/// The stored counts are what processes of different versions share during a rolling deploy
/// (issue #48 changed how `sliding.lua` receives its limits, packed with their fields' prefixes
/// made by the client, not what it stores): the fields are named `index:duration:precision:`
/// as before, counts written in that form by another process are read, and a check writes the
/// same form back; for a fixed window (`bucket`'s path) and for a limiter of a fixed window and
/// sub-buckets (the general path), one of whose prefixes is too long for MessagePack's shortest
/// text form.
#[test]
fn stored_counts_keep_their_form() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let backend = redis(&server, &clock);
    let mut conn = redis::Client::open(server.url()).and_then(|c| c.get_connection()).expect("a connection");
    let second = (START / 1_000_000).to_string();

    let bucket = backend.bucket("form-bucket", 10, SECOND).unwrap();
    assert!(bucket.check_blocking(Some("k"), 1).unwrap().allowed);
    let (hash, fields) = stored_hash(&mut conn, "form-bucket");
    let p = "0:1000000:1000000:";
    assert_eq!(fields.get(&format!("{p}n")), Some(&second), "{fields:?}");
    assert_eq!(fields.get(&format!("{p}c")).map(String::as_str), Some("1"), "{fields:?}");
    assert!(fields.get("cfg").is_some_and(|f| f.parse::<u64>().is_ok()), "{fields:?}");
    assert_eq!(fields.len(), 3, "{fields:?}");
    // As a process of another version writes it: 7 in this window, so 3 are left.
    let () = redis::cmd("HSET").arg(&hash).arg(format!("{p}c")).arg(7).query(&mut conn).unwrap();
    assert_eq!(bucket.peek_blocking(Some("k")).unwrap().remaining, 3);
    assert!(bucket.check_blocking(Some("k"), 3).unwrap().allowed);
    assert!(!bucket.check_blocking(Some("k"), 1).unwrap().allowed);
    let count: String = redis::cmd("HGET").arg(&hash).arg(format!("{p}c")).query(&mut conn).unwrap();
    assert_eq!(count, "10");

    // A year-long fixed window (a prefix of 32 characters) and a minute in one-second steps.
    let year = Duration::from_secs(31_536_000);
    let limits = [sliding(year, 50, year), sliding(Duration::from_secs(60), 100, SECOND)];
    let limiter = backend.sliding_window("form-sliding", &limits).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    let (hash, fields) = stored_hash(&mut conn, "form-sliding");
    let (p0, p1) = ("0:31536000000000:31536000000000:", "1:60000000:1000000:");
    let year_block = (START / 31_536_000_000_000).to_string();
    let expected: std::collections::HashMap<String, String> = [
        (format!("{p0}n"), year_block.as_str()),
        (format!("{p0}c"), "1"),
        (format!("{p1}c"), "1"),
        (format!("{p1}n"), second.as_str()),
        (format!("{p1}f"), "0"),
        (format!("{p1}l"), &(START / 1_000_000 - 59).to_string()),
        (format!("{p1}g"), "1"),
        ("cfg".to_owned(), fields["cfg"].as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_owned()))
    .collect();
    assert_eq!(fields, expected);
    let zset = hash.replace(":h", ":b");
    let members: Vec<String> = redis::cmd("ZRANGE").arg(&zset).arg(0).arg(-1).query(&mut conn).unwrap();
    assert_eq!(members, [format!("{p1}{:016}:1", START / 1_000_000)], "the sub-buckets in {zset}");
    // Another process's count in the year's window: 45, so 5 are left.
    let () = redis::cmd("HSET").arg(&hash).arg(format!("{p0}c")).arg(45).query(&mut conn).unwrap();
    assert_eq!(limiter.peek_blocking(Some("k")).unwrap().remaining, 5);
    assert!(limiter.check_blocking(Some("k"), 5).unwrap().allowed);
    assert!(!limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    let counts: Vec<String> =
        redis::cmd("HMGET").arg(&hash).arg(format!("{p0}c")).arg(format!("{p1}c")).query(&mut conn).unwrap();
    assert_eq!(counts, ["50", "6"]);
}
