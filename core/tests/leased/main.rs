//! Leased kinds on real Redis: leased token buckets (`bucket`) and leased partitions
//! (`partitions`), exact accounting across processes.

#[path = "../support/mod.rs"]
mod support;

mod bucket;
mod partitions;
