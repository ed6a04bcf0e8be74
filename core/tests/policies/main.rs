//! The policies over limiters, each on memory, Redis and Redis Cluster: blocks, pauses and
//! `observe`, shadow mode, the deny cache, `check_all`.

#[path = "../support/mod.rs"]
mod support;

mod block;
mod check_all;
mod deny_cache;
mod pause;
mod shadow;
