//! A Rust process sharing one Redis bucket with the Ruby gem's test (ruby/test/limiter_test.rb),
//! through the core API directly: it reports what the other language left, then takes the rest.
//!
//! Usage: `shared_bucket URL PREFIX NAME LIMIT INTERVAL_SECS`. Prints `remaining=N` (a peek)
//! then `admitted=N` (checks until the first refusal), one per line.

use std::process::ExitCode;

use ratekeeper::params::duration_from_secs;
use ratekeeper::{Backend, RedisConfig};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, prefix, name, limit, interval] = args.as_slice() else {
        eprintln!("usage: shared_bucket URL PREFIX NAME LIMIT INTERVAL_SECS");
        return ExitCode::from(2);
    };
    match run(url, prefix, name, limit, interval) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shared_bucket: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(url: &str, prefix: &str, name: &str, limit: &str, interval: &str) -> Result<(), Box<dyn std::error::Error>> {
    let backend = Backend::redis_with(RedisConfig::new(url).prefix(prefix))?;
    let interval = duration_from_secs("interval", interval.parse()?)?;
    let bucket = backend.bucket(name, limit.parse()?, interval)?;
    println!("remaining={}", bucket.peek_blocking(None)?.remaining);
    let mut admitted = 0u64;
    while bucket.check_blocking(None, 1)?.allowed {
        admitted += 1;
    }
    println!("admitted={admitted}");
    Ok(())
}
