//! The same conformance vectors on a real Redis server, a 3-master Redis Cluster and a TLS
//! server, with the manual clock's time sent to the scripts. Each case gets its own key prefix.
//! Standalone and TLS servers run them twice: blocking calls go over the calling thread's own
//! connection, async calls over the shared multiplexed one.
//! Calls get a generous deadline: these tests are about answers, not time (redis_failures.rs
//! holds the deadlines), and a TLS handshake on a loaded machine can take longer than 200 ms.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ratekeeper::{Backend, RedisConfig, TlsConfig};
use support::vectors::CallStyle;
use support::{RedisCluster, RedisServer};

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
