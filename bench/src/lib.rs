//! What the benchmark binaries share: a redis-server of their own.

pub mod server;
