//! The conformance vectors on the memory backend.

mod support;

use ratekeeper::{Backend, MemoryConfig};

#[test]
fn conformance_vectors_on_memory() {
    support::vectors::run_conformance("memory", &|clock| {
        Backend::memory_with(MemoryConfig::default().clock(clock)).expect("a memory backend")
    });
}
