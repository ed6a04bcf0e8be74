//! The README's Rust quickstart: `cargo run -p ratekeeper --example quickstart`.
use std::time::Duration;

use ratekeeper::{Backend, Policy};

fn main() -> Result<(), ratekeeper::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = Backend::redis(&url)?; // or Backend::memory()

    let api = backend.token_bucket("stripe", 10.0, 20)?; // 10/s, bursts of 20
    let d = api.check_blocking(Some("user-42"), 1)?; // never waits; a refusal consumes nothing
    println!("allowed: {}, remaining: {}", d.allowed, d.remaining);
    if !d.allowed {
        println!("retry in {:?}", d.retry_after);
    }

    let erp = backend.concurrent("erp", 50, Duration::from_secs(30))?; // at most 50 at once
    erp.within_limit_blocking(None, 1, Policy::Raise, |_permit| call_erp())?;

    let graphql = backend.points("shopify", 1000, Duration::from_secs(20))?;
    let charged = graphql.within_limit_blocking(Some("shop-7"), 200, Policy::Raise, |permit| {
        let actual = run_query();
        permit.points_used_blocking(actual) // refund or charge the difference
    })?;
    println!("points left after the query: {}", charged.transpose()?.map_or(0, |d| d.remaining));
    Ok(())
}

fn call_erp() {}

/// The query's real cost, known once it ran.
fn run_query() -> u64 {
    150
}
