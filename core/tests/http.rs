//! The shared HTTP rules (`tests/http/cases.json`) through the core: client keys, header fields
//! and the per-limiter facts the middleware asks. The `count` cases need a middleware and run in
//! each binding's suite.

use std::time::Duration;

use ratekeeper::http::{duration_of_secs, Report, ReportLimit, Rules};
use ratekeeper::Backend;
use serde_json::Value;

fn table() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/http/cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn window(value: &Value) -> Option<Duration> {
    value.as_f64().map(duration_of_secs)
}

fn secs(v: &Value, field: &str) -> Duration {
    duration_of_secs(v[field].as_f64().unwrap())
}

#[test]
fn client_keys() {
    let table = table();
    for case in table["client_key"].as_array().unwrap() {
        let trusted: Vec<&str> = case["trusted_proxies"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
            .unwrap_or_default();
        let rules =
            Rules::new(None, &trusted, case["proxy_header"].as_str().unwrap_or("X-Forwarded-For"), None).unwrap();
        let wanted = rules.clients().header().name();
        let header = case["headers"].as_object().unwrap().iter().find(|(k, _)| k.eq_ignore_ascii_case(wanted));
        let key = rules.client_key(case["peer"].as_str(), header.map(|(_, v)| v.as_str().unwrap()));
        assert_eq!(key, case["key"].as_str().unwrap(), "{}", case["name"]);
    }
}

#[test]
fn header_fields() {
    let table = table();
    for case in table["fields"].as_array().unwrap() {
        let secret = case["partition_key_secret"].as_str().map(str::as_bytes);
        let rules = Rules::new::<&str>(case["headers"].as_str(), &[], "X-Forwarded-For", secret).unwrap();
        let reports: Vec<Report<'_>> = case["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| Report {
                name: r["name"].as_str().unwrap(),
                decision: ReportLimit {
                    limit: r["limit"].as_u64().unwrap(),
                    remaining: r["remaining"].as_u64().unwrap(),
                    reset_after: secs(r, "reset_after"),
                    retry_after: secs(r, "retry_after"),
                    allowed: r["allowed"].as_bool().unwrap(),
                    window: window(&r["window"]),
                },
                limits: r["limits"]
                    .as_array()
                    .map(|ls| {
                        ls.iter()
                            .map(|l| {
                                let n = |f: &str| l[f].as_u64().unwrap();
                                ReportLimit::of_limit(
                                    secs(l, "window"),
                                    n("limit"),
                                    n("remaining"),
                                    secs(l, "reset_after"),
                                    secs(l, "retry_after"),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        let got: Vec<Value> = rules
            .fields(&reports, case["key"].as_str().unwrap())
            .into_iter()
            .map(|(name, value)| Value::from(vec![name.to_owned(), value]))
            .collect();
        assert_eq!(Value::from(got), case["fields"], "{}", case["name"]);
    }
}

#[test]
fn limiter_facts() {
    let table = table();
    let backend = Backend::memory();
    for case in table["limiters"].as_array().unwrap() {
        let limiter = backend.limiter_from_json("facts", &case["limiter"].to_string()).unwrap();
        assert_eq!(limiter.capacity(), case["capacity"].as_u64().unwrap(), "{}", case["limiter"]);
        assert_eq!(limiter.refundable(), case["refundable"].as_bool().unwrap(), "{}", case["limiter"]);
        assert_eq!(limiter.window(), window(&case["window"]), "{}", case["limiter"]);
    }
}
