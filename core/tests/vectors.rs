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

/// The README's "Specs as data" examples, as pasted: each line parses, builds a limiter, and is
/// already in the canonical form every language reads back.
#[test]
fn documented_spec_examples_are_canonical() {
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/concepts/specs.md");
    let text = std::fs::read_to_string(page).unwrap();
    let section = text.split("# Specs as data").nth(1).expect("a \"Specs as data\" page");
    let block = section.split("```json\n").nth(1).and_then(|b| b.split("```").next()).expect("a json block");
    let backend = Backend::memory();
    let mut kinds = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let limiter = backend.limiter_from_json("readme", line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let expected = line.replace(r#","wait_timeout":5"#, ""); // the default is not written back
        assert_eq!(limiter.spec_json(), expected, "docs/src/concepts/specs.md shows a non-canonical spec");
        kinds.push(limiter.kind().as_str());
    }
    assert!(kinds.len() >= 10, "{kinds:?}");
}
