//! `ratekeeper::otel` (feature `otel`) through the OpenTelemetry SDK's in-memory metric exporter:
//! exact counts for the scripted sequence the Python and Node tests run, on memory and on a real
//! `redis-server`; the limited key in no attribute; a closed instrumentation reads nothing more.
//! Run with `cargo test -p ratekeeper --features otel --test otel`; the region `setup` of this
//! file (core/tests/otel.rs) is the example of docs/src/operating/observability.md.
#![cfg(feature = "otel")]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use ratekeeper::{otel, Backend, Limiter};
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

    /// The latest collection's points with a value as "instrument limiter third-attribute"
    /// (a histogram's value: its count), each point's attributes checked for the key.
    fn counted(&self) -> BTreeMap<String, u64> {
        self.exporter.reset();
        self.provider.force_flush().expect("a flush");
        let mut out = BTreeMap::new();
        for resource in self.exporter.get_finished_metrics().expect("metrics") {
            for scope in resource.scope_metrics() {
                assert_eq!(scope.scope().name(), "ratekeeper");
                for metric in scope.metrics() {
                    let points: Vec<(Vec<&KeyValue>, u64)> = match metric.data() {
                        AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                            sum.data_points().map(|p| (p.attributes().collect(), p.value())).collect()
                        }
                        AggregatedMetrics::I64(MetricData::Sum(sum)) => {
                            sum.data_points().map(|p| (p.attributes().collect(), p.value() as u64)).collect()
                        }
                        AggregatedMetrics::F64(MetricData::Histogram(histogram)) => histogram
                            .data_points()
                            .map(|p| {
                                assert_eq!(p.bucket_counts().sum::<u64>(), p.count());
                                assert!(p.sum() > 0.0, "{} has a sum", metric.name());
                                (p.attributes().collect(), p.count())
                            })
                            .collect(),
                        _ => panic!("{} is of an unexpected type", metric.name()),
                    };
                    for (attributes, value) in points {
                        let attributes: BTreeMap<String, String> =
                            attributes.into_iter().map(|kv| (kv.key.to_string(), kv.value.to_string())).collect();
                        assert!(attributes.values().all(|v| !v.contains(KEY)), "the key in {attributes:?}");
                        let third = attributes
                            .iter()
                            .find(|(k, _)| *k != "ratekeeper.limiter" && *k != "ratekeeper.kind")
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default();
                        if value > 0 || metric.name() != "ratekeeper.decisions" {
                            out.insert(
                                format!("{} {} {third}", metric.name(), attributes["ratekeeper.limiter"]),
                                value,
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
    // The async form: on memory, `acquire_blocking` tries once in process and once more in
    // `acquire` after a refusal (two checks), on Redis once.
    let over = ratekeeper::block_on(blocky.acquire(k, 1, Some(Duration::ZERO))).expect_err("blocked: over the limit");
    assert!(over.is_over_limit());
    let quiet = backend.token_bucket("quiet", 0.001, 10).expect("quiet");
    quiet.pause_blocking(k, Duration::from_secs(60)).expect("pause");
    assert!(!quiet.check_blocking(k, 1).expect("check").allowed);
    let pool = backend.concurrent("pool", 2, Duration::from_secs(30)).expect("pool");
    let leases = [pool.check_blocking(k, 1).expect("lease"), pool.check_blocking(k, 1).expect("lease")];
    assert!(!pool.check_blocking(k, 1).expect("check").allowed);
    pool.release_blocking(k, leases[0].lease.as_ref().expect("a lease")).expect("release");
    pool.acquire_blocking(k, 1, Some(Duration::from_secs(5))).expect("a free slot");
    vec![api, dry, blocky, quiet, pool]
}

/// What the script counts; each check's duration is in `ratekeeper.check.duration` under its
/// outcome (as many as its decisions), each acquire's in `ratekeeper.wait.duration`.
fn expected() -> BTreeMap<String, u64> {
    let decisions = [
        ("api admitted", 3),
        ("api refused", 2),
        ("dry admitted", 1),
        ("dry shadow_refused", 2),
        ("blocky refused", 2),
        ("quiet refused", 1),
        ("pool admitted", 3),
        ("pool refused", 1),
    ];
    let others = [
        ("ratekeeper.holds blocky block", 2),
        ("ratekeeper.holds blocky pause", 0),
        ("ratekeeper.holds quiet block", 0),
        ("ratekeeper.holds quiet pause", 1),
        ("ratekeeper.settle.units api refunded", 2),
        ("ratekeeper.settle.units api charged", 0),
        ("ratekeeper.leases.granted pool immediate", 3),
        ("ratekeeper.leases.granted pool waited", 0),
        ("ratekeeper.leases.held pool ", 2),
        ("ratekeeper.wait.duration blocky refused", 1),
        ("ratekeeper.wait.duration pool admitted", 1),
    ];
    decisions
        .iter()
        .flat_map(|(series, n)| {
            ["ratekeeper.decisions", "ratekeeper.check.duration"].map(|name| (format!("{name} {series}"), *n))
        })
        .chain(others.iter().map(|(k, v)| (k.to_string(), *v)))
        .collect()
}

fn check_sequence(backend: &Backend) {
    let meter = Meter::new();
    let instrumentation = otel::instrument(backend, &meter.provider);
    let limiters = script(backend);
    assert_eq!(meter.counted(), expected());
    limiters[0].check_blocking(Some(KEY), 1).expect("check");
    let counted = meter.counted();
    assert_eq!(counted["ratekeeper.decisions api admitted"], 4, "cumulative; the settle gave 2 back");
    assert_eq!(counted["ratekeeper.check.duration api admitted"], 4, "recorded once");
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
    check_sequence(&Backend::redis_with(support::redis_config(server.url()).prefix("otel")).expect("a Redis backend"));
}

/// The instruments' descriptions are those of the Python and Node bindings (`otel.py`,
/// `otel.js`), whose instruments are the same: the core makes them from its tables of outcomes
/// and holds, and they must read as the bindings' literal texts do.
#[test]
fn descriptions_are_the_bindings() {
    let meter = Meter::new();
    let backend = Backend::memory();
    let _instrumentation = otel::instrument(&backend, &meter.provider);
    let _limiters = script(&backend);
    meter.provider.force_flush().expect("a flush");
    let mut descriptions = BTreeMap::new();
    for resource in meter.exporter.get_finished_metrics().expect("metrics") {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics() {
                descriptions.insert(metric.name().to_owned(), metric.description().to_owned());
            }
        }
    }
    assert_eq!(
        descriptions["ratekeeper.decisions"],
        "Checks by outcome (admitted, refused, shadow_refused, refused_locally, failed_open, fallback, error)."
    );
    assert_eq!(
        descriptions["ratekeeper.holds"],
        "Checks refused by a hold (a pause, or a block: block_for after a refusal, or block by hand); also in ratekeeper.decisions."
    );
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

#[test]
fn traced_calls_make_a_span_each_and_one_per_redis_round_trip() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(support::redis_config(server.url()).prefix("oteltr")).expect("a Redis backend");
    // The script cached: each check is then one EVALSHA.
    backend.token_bucket("warm", 1000.0, 1000).expect("warm").check_blocking(Some("warm"), 1).expect("a decision");
    // --8<-- [start:traced]
    use opentelemetry::trace::{Tracer, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    // The application's provider; in production one with an OTLP exporter.
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let tracer = provider.tracer("app");
    let api = backend.token_bucket("api", 0.001, 2).expect("a limiter");
    tracer.in_span("request", |_| {
        for _ in 0..3 {
            // A span `ratekeeper check` in the current context, with a child `EVALSHA`.
            otel::traced(&tracer, &api, "check", || api.check_blocking(Some(KEY), 1)).expect("a decision");
        }
        let refused =
            otel::traced(&tracer, &api, "acquire", || api.acquire_blocking(Some(KEY), 1, Some(Duration::ZERO)));
        assert!(matches!(refused, Err(ratekeeper::Error::OverLimit { .. })));
    });
    // --8<-- [end:traced]
    let spans = exporter.get_finished_spans().expect("the spans");
    for span in &spans {
        for kv in &span.attributes {
            assert!(!kv.value.as_str().contains(KEY), "the key in {}: {kv:?}", span.name);
        }
    }
    assert_eq!(spans.len(), 1 + 4 + 4, "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let request = spans.iter().find(|s| s.name == "request").expect("the caller's span");
    let attribute = |span: &opentelemetry_sdk::trace::SpanData, key: &str| {
        span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
    };
    let calls: Vec<_> = spans.iter().filter(|s| s.name.starts_with("ratekeeper ")).collect();
    assert_eq!(
        calls.iter().map(|s| (s.name.as_ref(), attribute(s, "ratekeeper.outcome").unwrap())).collect::<Vec<_>>(),
        [
            ("ratekeeper check", "admitted".to_owned()),
            ("ratekeeper check", "admitted".to_owned()),
            ("ratekeeper check", "refused".to_owned()),
            ("ratekeeper acquire", "refused".to_owned()),
        ]
    );
    for call in &calls {
        assert_eq!(call.parent_span_id, request.span_context.span_id());
        assert_eq!(attribute(call, "ratekeeper.limiter").as_deref(), Some("api"));
        assert_eq!(attribute(call, "ratekeeper.kind").as_deref(), Some("token_bucket"));
        let trips: Vec<_> = spans.iter().filter(|s| s.parent_span_id == call.span_context.span_id()).collect();
        assert_eq!(trips.len(), 1);
        assert_eq!(trips[0].name, "EVALSHA");
        assert_eq!(trips[0].span_kind, opentelemetry::trace::SpanKind::Client);
        assert_eq!(attribute(trips[0], "db.system.name").as_deref(), Some("redis"));
        assert_eq!(attribute(trips[0], "db.operation.name").as_deref(), Some("EVALSHA"));
        assert_eq!(attribute(trips[0], "server.port"), Some(server.port.to_string()));
        assert!(call.start_time <= trips[0].start_time && trips[0].end_time <= call.end_time);
    }
}

/// The spans an in-memory exporter holds, with the key in none of their attributes.
fn finished(exporter: &opentelemetry_sdk::trace::InMemorySpanExporter) -> Vec<opentelemetry_sdk::trace::SpanData> {
    let spans = exporter.get_finished_spans().expect("the spans");
    for span in &spans {
        for kv in &span.attributes {
            assert!(!kv.value.as_str().contains(KEY), "the key in {}: {kv:?}", span.name);
        }
    }
    spans
}

fn attribute(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
}

/// Each call span's name, outcome and the names of its child spans (its round trips), in order.
fn calls(spans: &[opentelemetry_sdk::trace::SpanData]) -> Vec<(String, Option<String>, Vec<String>)> {
    spans
        .iter()
        .filter(|s| s.name.starts_with("ratekeeper "))
        .map(|call| {
            let trips: Vec<_> = spans.iter().filter(|s| s.parent_span_id == call.span_context.span_id()).collect();
            for trip in &trips {
                assert_eq!(trip.span_kind, opentelemetry::trace::SpanKind::Client);
                assert_eq!(attribute(trip, "db.system.name").as_deref(), Some("redis"));
                assert!(call.start_time <= trip.start_time && trip.end_time <= call.end_time);
            }
            (
                call.name.to_string(),
                attribute(call, "ratekeeper.outcome"),
                trips.iter().map(|t| t.name.to_string()).collect(),
            )
        })
        .collect()
}

fn a_tracer() -> (opentelemetry_sdk::trace::InMemorySpanExporter, opentelemetry_sdk::trace::SdkTracerProvider) {
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider =
        opentelemetry_sdk::trace::SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    (exporter, provider)
}

#[test]
fn traced_async_calls_make_a_span_each_and_one_per_redis_round_trip() {
    use opentelemetry::trace::{FutureExt, TraceContextExt, Tracer, TracerProvider as _};

    let server = RedisServer::start();
    let backend = Backend::redis_with(support::redis_config(server.url()).prefix("otelas")).expect("a Redis backend");
    backend.token_bucket("warm", 1000.0, 1000).expect("warm").check_blocking(Some("warm"), 1).expect("a decision");
    let (exporter, provider) = a_tracer();
    let tracer = provider.tracer("app");
    let api = backend.token_bucket("api", 0.001, 2).expect("a limiter");
    let request = tracer.start("request");
    let context = opentelemetry::Context::current_with_span(request);
    ratekeeper::block_on(
        async {
            for _ in 0..3 {
                // --8<-- [start:traced_async]
                otel::traced_async(&tracer, &api, "check", api.check(Some(KEY), 1)).await.expect("a decision");
                // --8<-- [end:traced_async]
            }
            let refused =
                otel::traced_async(&tracer, &api, "acquire", api.acquire(Some(KEY), 1, Some(Duration::ZERO))).await;
            assert!(matches!(refused, Err(ratekeeper::Error::OverLimit { .. })));
        }
        .with_context(context.clone()),
    );
    context.span().end();
    let spans = finished(&exporter);
    assert_eq!(spans.len(), 1 + 4 + 4, "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let request = spans.iter().find(|s| s.name == "request").expect("the caller's span");
    let trip = || vec!["EVALSHA".to_owned()];
    assert_eq!(
        calls(&spans),
        [
            ("ratekeeper check".to_owned(), Some("admitted".to_owned()), trip()),
            ("ratekeeper check".to_owned(), Some("admitted".to_owned()), trip()),
            ("ratekeeper check".to_owned(), Some("refused".to_owned()), trip()),
            ("ratekeeper acquire".to_owned(), Some("refused".to_owned()), trip()),
        ]
    );
    for call in spans.iter().filter(|s| s.name.starts_with("ratekeeper ")) {
        assert_eq!(call.parent_span_id, request.span_context.span_id());
        assert_eq!(attribute(call, "ratekeeper.limiter").as_deref(), Some("api"));
    }
}

/// peek, settle, release, check_all and acquire_all, traced blocking and async, on `backend`:
/// one span each with its attributes, and on Redis one round trip each (`trips`).
fn other_calls_traced(backend: &Backend, trips: &[&str]) {
    use opentelemetry::trace::TracerProvider as _;
    use otel::CallSpan;

    let (exporter, provider) = a_tracer();
    let tracer = provider.tracer("app");
    let api = backend.token_bucket("api", 0.001, 10).expect("a limiter");
    let pool = backend.concurrent("pool", 1, Duration::from_secs(30)).expect("a pool");
    // Each call once untraced first: every script is then cached (one EVALSHA each).
    let warm = |n: &str| {
        let d = api.check_blocking(Some(n), 2).expect("check");
        api.peek_blocking(Some(n)).expect("peek");
        api.settle_blocking(&d, 1).expect("settle");
        let c = backend.check_all_blocking(&[(&api, Some(n), 1), (&pool, Some(n), 1)]).expect("check_all");
        c.release_blocking().expect("release");
        let c = backend
            .acquire_all_blocking(&[(&api, Some(n), 1), (&pool, Some(n), 1)], Some(Duration::ZERO))
            .expect("acquire_all");
        c.release_blocking().expect("release");
    };
    warm("warm");
    let k = Some(KEY);
    let checked = api.check_blocking(k, 3).expect("check");
    otel::traced(&tracer, &api, "peek", || api.peek_blocking(k)).expect("peek");
    // --8<-- [start:traced_call]
    otel::traced_call(&tracer, CallSpan::settle(&api, &checked, 1), || api.settle_blocking(&checked, 1))
        .expect("settle");
    let combined = otel::traced_call(&tracer, CallSpan::of_all(&[&api, &pool], "check_all"), || {
        backend.check_all_blocking(&[(&api, k, 1), (&pool, k, 1)])
    })
    .expect("check_all");
    // --8<-- [end:traced_call]
    assert!(combined.allowed);
    let lease = combined.parts[1].decision.lease.expect("a lease");
    let refused = ratekeeper::block_on(otel::traced_call_async(
        &tracer,
        CallSpan::of_all(&[&api, &pool], "acquire_all"),
        backend.acquire_all(&[(&api, k, 1), (&pool, k, 1)], Some(Duration::ZERO)),
    ));
    assert!(matches!(refused, Err(ratekeeper::Error::OverLimit { .. })));
    ratekeeper::block_on(otel::traced_async(&tracer, &pool, "release", pool.release(k, &lease))).expect("release");
    let spans = finished(&exporter);
    let trip = |t: &str| if t.is_empty() { vec![] } else { vec![t.to_owned()] };
    assert_eq!(
        calls(&spans),
        [
            ("ratekeeper peek".to_owned(), Some("admitted".to_owned()), trip(trips[0])),
            ("ratekeeper settle".to_owned(), Some("admitted".to_owned()), trip(trips[1])),
            ("ratekeeper check_all".to_owned(), Some("admitted".to_owned()), trip(trips[2])),
            ("ratekeeper acquire_all".to_owned(), Some("refused".to_owned()), trip(trips[3])),
            ("ratekeeper release".to_owned(), None, trip(trips[4])),
        ]
    );
    assert_eq!(spans.len(), 5 + trips.iter().filter(|t| !t.is_empty()).count());
    let by_name = |name: &str| spans.iter().find(|s| s.name == name).expect(name);
    let settle = by_name("ratekeeper settle");
    assert_eq!(attribute(settle, "ratekeeper.direction").as_deref(), Some("refunded"));
    assert_eq!(attribute(settle, "ratekeeper.units").as_deref(), Some("2"));
    assert_eq!(attribute(settle, "ratekeeper.limiter").as_deref(), Some("api"));
    let all = by_name("ratekeeper check_all");
    let limiters = all.attributes.iter().find(|kv| kv.key.as_str() == "ratekeeper.limiters").expect("the limiters");
    assert_eq!(
        limiters.value,
        opentelemetry::Value::Array(opentelemetry::Array::String(vec!["api".into(), "pool".into()]))
    );
    assert!(attribute(by_name("ratekeeper acquire_all"), "ratekeeper.retry_after").is_some());
    assert_eq!(attribute(by_name("ratekeeper release"), "ratekeeper.kind").as_deref(), Some("concurrent"));
    assert_eq!(attribute(by_name("ratekeeper peek"), "ratekeeper.retry_after").as_deref(), Some("0"));
}

#[test]
fn peek_settle_release_and_check_all_are_traced_on_memory() {
    other_calls_traced(&Backend::memory(), &[""; 5]);
}

#[test]
fn peek_settle_release_and_check_all_are_traced_on_redis() {
    let server = RedisServer::start();
    let backend =
        Backend::redis_with(support::redis_config(server.url()).prefix("otelother")).expect("a Redis backend");
    other_calls_traced(&backend, &["EVALSHA"; 5]);
}
