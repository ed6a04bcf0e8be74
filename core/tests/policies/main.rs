//! The policies over limiters, each on memory, Redis and Redis Cluster: blocks, pauses and
//! `observe` (and both seen across processes: `holds`), shadow mode, the deny cache, `check_all`.

#[path = "../support/mod.rs"]
mod support;

mod block;
mod check_all;
mod deny_cache;
mod holds;
mod pause;
mod shadow;
