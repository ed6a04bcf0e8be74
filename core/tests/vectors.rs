//! The conformance vectors on the memory backend, through the blocking and the async API.

mod support;

use ratekeeper::{Backend, MemoryConfig};
use support::vectors::CallStyle;

fn memory(clock: std::sync::Arc<ratekeeper::ManualClock>) -> Backend {
    Backend::memory_with(MemoryConfig::default().clock(clock)).expect("a memory backend")
}

#[test]
fn conformance_vectors_on_memory() {
    support::vectors::run_conformance("memory", CallStyle::Blocking, &memory);
}

#[test]
fn conformance_vectors_on_memory_async() {
    support::vectors::run_conformance("memory", CallStyle::Async, &memory);
}
