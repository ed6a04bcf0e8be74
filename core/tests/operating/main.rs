//! What an operator sees and changes: live limits and the registry, metrics and Prometheus
//! (`live`), views of raw state (`views`), the fleet metrics flush (`metrics_flush`).

#[path = "../support/mod.rs"]
mod support;

mod live;
mod metrics_flush;
mod views;
