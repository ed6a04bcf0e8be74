//! Settling a call with its actual cost: an LLM request checked with its estimated tokens
//! (prompt + max output), settled with the tokens it really used.
//! `cargo run -p ratekeeper --example settle`.
use ratekeeper::Backend;

fn main() -> Result<(), ratekeeper::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = Backend::redis(&url)?;
    let tokens = backend.token_bucket("llm-tokens", 100.0, 20_000)?; // per user: 100/s, burst 20k

    let estimate = 1_200 + 4_000; // prompt tokens + max output tokens
    let decision = tokens.check_blocking(Some("user-42"), estimate)?;
    assert!(decision.allowed);
    let used = 1_200 + 350; // what the response says it used
    let after = tokens.settle_blocking(&decision, used)?; // refunds 3650 tokens
    println!("charged {estimate}, settled to {used}: {} left", after.remaining);

    // A retry of the same settle (e.g. after a timeout) applies nothing more.
    let again = tokens.settle_blocking(&decision, used)?;
    println!("settled again: {} left", again.remaining);
    Ok(())
}
