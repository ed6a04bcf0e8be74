//! What the benchmark binaries share: a redis-server of their own and the JSON of their results.

pub mod report;
pub mod server;
