//! The README's concurrent-limiter example: leases, fencing tokens, metrics.
//! `cargo run -p ratekeeper --example leases`.
use std::time::Duration;

use ratekeeper::Backend;

fn main() -> Result<(), ratekeeper::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = Backend::redis(&url)?;

    let erp = backend.concurrent("erp", 10, Duration::from_secs(30))?; // lock_timeout 30 s
    let d = erp.acquire_blocking(Some("tenant-3"), 1, Some(Duration::from_secs(5)))?; // waits ≤ 5 s
    let lease = d.lease.expect("a granted concurrent call holds a lease");
    write_to_erp(lease.fencing_token); // the resource refuses tokens lower than one it saw
    erp.extend_blocking(Some("tenant-3"), &lease)?; // still busy: another 30 s
    erp.release_blocking(Some("tenant-3"), &lease)?; // LeaseLost if it had been reclaimed
    let m = erp.metrics(); // this process; erp.fleet_metrics_blocking() for all of them
    println!("held: {}, immediate: {}, waited: {}", m.held, m.immediate, m.waited);
    Ok(())
}

fn write_to_erp(fencing_token: u64) {
    assert!(fencing_token > 0);
}
