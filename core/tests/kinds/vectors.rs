//! The conformance vectors (`tests/vectors/`), one runner (`support::vectors`) with the backend
//! as its parameter: memory through the blocking and the async API; a real Redis server, a
//! 3-master Redis Cluster and a TLS server, with the manual clock's time sent to the scripts.
//! Each Redis case gets its own key prefix. Standalone and TLS servers run them twice: blocking
//! calls go over the calling thread's own connection, async calls over the shared multiplexed
//! one. Redis calls get a generous deadline: these tests are about answers, not time
//! (`faults/failures.rs` holds the deadlines), and a TLS handshake on a loaded machine can take
//! longer than 200 ms.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ratekeeper::{Backend, MemoryConfig, RedisConfig, TlsConfig};
use support::vectors::CallStyle;
use support::{RedisCluster, RedisServer};

fn memory(clock: std::sync::Arc<ratekeeper::ManualClock>) -> Backend {
    Backend::memory_with(MemoryConfig::default().clock(clock)).expect("a memory backend")
}

#[test]
fn conformance_vectors_on_memory() {
    support::vectors::run_conformance("memory", CallStyle::Blocking, &memory);
}

#[test]
fn conformance_vectors_on_memory_async() {
    support::vectors::run_conformance("memory", CallStyle::Async, &memory);
}

/// The README's "Specs as data" examples, as pasted: each line parses, builds a limiter, and is
/// already in the canonical form every language reads back.
#[test]
fn documented_spec_examples_are_canonical() {
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/concepts/specs.md");
    let text = std::fs::read_to_string(page).unwrap();
    let section = text.split("# Specs as data").nth(1).expect("a \"Specs as data\" page");
    let block = section.split("```json\n").nth(1).and_then(|b| b.split("```").next()).expect("a json block");
    let backend = Backend::memory();
    let mut kinds = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let limiter = backend.limiter_from_json("readme", line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let expected = line.replace(r#","wait_timeout":5"#, ""); // the default is not written back
        assert_eq!(limiter.spec_json(), expected, "docs/src/concepts/specs.md shows a non-canonical spec");
        kinds.push(limiter.kind().as_str());
    }
    assert!(kinds.len() >= 10, "{kinds:?}");
}

const DEADLINE: Duration = Duration::from_secs(5);

fn prefix() -> String {
    static CASE: AtomicU32 = AtomicU32::new(0);
    format!("case{}", CASE.fetch_add(1, Ordering::Relaxed))
}

fn standalone(server: &RedisServer, clock: std::sync::Arc<ratekeeper::ManualClock>) -> Backend {
    Backend::redis_with(RedisConfig::new(server.url()).prefix(prefix()).deadline(DEADLINE).clock(clock))
        .expect("a Redis backend")
}

fn over_tls(server: &RedisServer, clock: std::sync::Arc<ratekeeper::ManualClock>) -> Backend {
    let ca = server.tls.as_ref().unwrap().ca_pem();
    let config =
        RedisConfig::new(server.url()).tls(TlsConfig::with_ca_pem(ca)).prefix(prefix()).deadline(DEADLINE).clock(clock);
    Backend::redis_with(config).expect("a TLS backend")
}

#[test]
fn conformance_vectors_on_redis() {
    let server = RedisServer::start();
    support::vectors::run_conformance("redis", CallStyle::Blocking, &|clock| standalone(&server, clock));
    support::vectors::run_conformance("redis", CallStyle::Async, &|clock| standalone(&server, clock));
}

#[test]
fn conformance_vectors_on_redis_cluster() {
    let cluster = RedisCluster::start();
    support::vectors::run_conformance("redis cluster", CallStyle::Blocking, &|clock| {
        Backend::redis_with(RedisConfig::cluster(cluster.seeds()).prefix(prefix()).deadline(DEADLINE).clock(clock))
            .expect("a cluster backend")
    });
}

#[test]
fn conformance_vectors_on_redis_over_tls() {
    let server = RedisServer::start_tls();
    support::vectors::run_conformance("redis over TLS", CallStyle::Blocking, &|clock| over_tls(&server, clock));
    support::vectors::run_conformance("redis over TLS", CallStyle::Async, &|clock| over_tls(&server, clock));
}
