//! `ratekeeper::otel` (feature `otel`) through the OpenTelemetry SDK's in-memory metric exporter:
//! exact counts for the scripted sequence the Python and Node tests run, on memory and on a real
//! `redis-server`; the limited key in no attribute; a closed instrumentation reads nothing more.
//! Run with `cargo test -p ratekeeper --features otel --test otel`; the region `setup` of this
//! file (core/tests/otel.rs) is the example of docs/src/operating/observability.md.
#![cfg(feature = "otel")]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use ratekeeper::{otel, Backend, Limiter, RedisConfig};
use support::RedisServer;

const KEY: &str = "user-4711@example.com";

/// A meter provider whose exports land in memory (each `points` forces one).
struct Meter {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl Meter {
    fn new() -> Meter {
        let exporter = InMemoryMetricExporter::default();
        let provider =
            SdkMeterProvider::builder().with_reader(PeriodicReader::builder(exporter.clone()).build()).build();
        Meter { provider, exporter }
    }

    /// The latest collection's points with a value as "instrument limiter third-attribute",
    /// each point's attributes checked for the key.
    fn counted(&self) -> BTreeMap<String, u64> {
        self.exporter.reset();
        self.provider.force_flush().expect("a flush");
        let mut out = BTreeMap::new();
        for resource in self.exporter.get_finished_metrics().expect("metrics") {
            for scope in resource.scope_metrics() {
                assert_eq!(scope.scope().name(), "ratekeeper");
                for metric in scope.metrics() {
                    let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() else {
                        panic!("{} is not a u64 sum", metric.name())
                    };
                    for point in sum.data_points() {
                        let attributes: BTreeMap<String, String> =
                            point.attributes().map(|kv| (kv.key.to_string(), kv.value.to_string())).collect();
                        assert!(attributes.values().all(|v| !v.contains(KEY)), "the key in {attributes:?}");
                        let third = attributes
                            .iter()
                            .find(|(k, _)| *k != "ratekeeper.limiter" && *k != "ratekeeper.kind")
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default();
                        if point.value() > 0 || metric.name() != "ratekeeper.decisions" {
                            out.insert(
                                format!("{} {} {third}", metric.name(), attributes["ratekeeper.limiter"]),
                                point.value(),
                            );
                        }
                    }
                }
            }
        }
        out
    }
}

/// The scripted decisions (the Python and Node tests' sequence); the limiters are returned
/// because a backend's metrics are those of its live limiters.
fn script(backend: &Backend) -> Vec<Limiter> {
    let k = Some(KEY);
    let api = backend.token_bucket("api", 0.001, 5).expect("api");
    let first = api.check_blocking(k, 3).expect("check");
    for _ in 0..2 {
        api.check_blocking(k, 1).expect("check");
    }
    for _ in 0..2 {
        assert!(!api.check_blocking(k, 1).expect("check").allowed);
    }
    api.settle_blocking(&first, 1).expect("settle");
    let dry = backend.token_bucket("dry", 0.001, 1).expect("dry").with_shadow(true).expect("shadow");
    for _ in 0..3 {
        assert!(dry.check_blocking(k, 1).expect("check").allowed);
    }
    let blocky = backend.token_bucket("blocky", 0.001, 10).expect("blocky");
    blocky.block_blocking(k, Duration::from_secs(60)).expect("block");
    assert!(!blocky.check_blocking(k, 1).expect("check").allowed);
    let pool = backend.concurrent("pool", 2, Duration::from_secs(30)).expect("pool");
    let leases = [pool.check_blocking(k, 1).expect("lease"), pool.check_blocking(k, 1).expect("lease")];
    assert!(!pool.check_blocking(k, 1).expect("check").allowed);
    pool.release_blocking(k, leases[0].lease.as_ref().expect("a lease")).expect("release");
    vec![api, dry, blocky, pool]
}

fn expected() -> BTreeMap<String, u64> {
    [
        ("ratekeeper.decisions api admitted", 3),
        ("ratekeeper.decisions api refused", 2),
        ("ratekeeper.decisions dry admitted", 1),
        ("ratekeeper.decisions dry shadow_refused", 2),
        ("ratekeeper.decisions blocky refused", 1),
        ("ratekeeper.decisions pool admitted", 2),
        ("ratekeeper.decisions pool refused", 1),
        ("ratekeeper.holds blocky block", 1),
        ("ratekeeper.settle.units api refunded", 2),
        ("ratekeeper.settle.units api charged", 0),
        ("ratekeeper.leases.granted pool immediate", 2),
        ("ratekeeper.leases.granted pool waited", 0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn check_sequence(backend: &Backend) {
    let meter = Meter::new();
    let instrumentation = otel::instrument(backend, &meter.provider);
    let limiters = script(backend);
    assert_eq!(meter.counted(), expected());
    limiters[0].check_blocking(Some(KEY), 1).expect("check");
    assert_eq!(meter.counted()["ratekeeper.decisions api admitted"], 4, "cumulative; the settle gave 2 back");
    instrumentation.close();
    limiters[0].check_blocking(Some(KEY), 1).expect("check");
    assert_ne!(meter.counted().get("ratekeeper.decisions api admitted"), Some(&5), "closed: not read");
    meter.provider.shutdown().expect("shutdown");
}

#[test]
fn a_scripted_sequence_is_counted_exactly_on_memory() {
    check_sequence(&Backend::memory());
}

#[test]
fn a_scripted_sequence_is_counted_exactly_on_redis() {
    let server = RedisServer::start();
    check_sequence(&Backend::redis_with(RedisConfig::new(server.url()).prefix("otel")).expect("a Redis backend"));
}

#[test]
fn the_documented_setup() {
    // --8<-- [start:setup]
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use ratekeeper::{otel, Backend};

    // The application's provider; in production a PeriodicReader of an OTLP exporter.
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder().with_reader(PeriodicReader::builder(exporter.clone()).build()).build();

    let backend = Backend::memory();
    // Reports while `_instrumentation` lives; `opentelemetry::global::meter_provider()` for the global one.
    let _instrumentation = otel::instrument(&backend, &provider);
    let api = backend.token_bucket("api", 10.0, 2).expect("a limiter");
    for _ in 0..3 {
        api.check_blocking(Some("user-42"), 1).expect("a decision");
    }
    // ratekeeper.decisions{ratekeeper.limiter="api", ratekeeper.kind="token_bucket",
    //                      ratekeeper.outcome="admitted"} = 2, ...{outcome="refused"} = 1
    // --8<-- [end:setup]
    let meter = Meter { provider, exporter };
    let counted = meter.counted();
    assert_eq!(counted["ratekeeper.decisions api admitted"], 2);
    assert_eq!(counted["ratekeeper.decisions api refused"], 1);
}
