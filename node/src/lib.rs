//! Placeholder until the binding issue fills it: the crate links the core so the workspace builds.

/// The core library version this binding is built against.
pub fn core_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
