//! Settles (docs/src/concepts/settle.md): retried settles apply once (`retries`), leased token
//! buckets' settles (`leased`), and their metrics (`metrics`). Settle ids after `fork()` are in
//! `core/tests/fork.rs` (alone in its binary).

#[path = "../support/mod.rs"]
mod support;

mod leased;
mod metrics;
mod retries;
