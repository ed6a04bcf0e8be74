//! The rules of each limiter kind, on every backend: the shared conformance vectors, property
//! tests against reference models, exact rates, the counting and calendar kinds, the shedders.

#[path = "../support/mod.rs"]
mod support;

mod calendar;
mod counting;
mod gcra_exact;
mod properties;
mod shedders;
mod vectors;
