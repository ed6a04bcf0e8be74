//! The README's leased-partitions example (Azure's rate limiting pattern).
//! `cargo run -p ratekeeper --example partitions`.
use std::time::Duration;

use ratekeeper::Backend;

fn main() -> Result<(), ratekeeper::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = Backend::redis(&url)?;

    // 100 writes per second for the whole fleet, in 20 partitions of 5/s leased for 15 s.
    let cosmos = backend.partitions("cosmos", 100.0, 20, Duration::from_secs(15), 0, false)?;
    for record in 0..40 {
        cosmos.acquire_blocking(None, 1, None)?; // paced: one call per 10 ms while it holds all 20
        write(record);
    }
    let held = cosmos.partitions_held(None)?;
    println!("holds {} partitions worth {}/s", held.partitions.len(), held.rate);
    cosmos.close_blocking()?; // give them back now rather than after the lease TTL
    Ok(())
}

fn write(_record: u32) {}
