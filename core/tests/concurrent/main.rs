//! The concurrent limiter: its leases on memory under a manual clock (`memory`), and on real
//! Redis across real OS processes (`redis`, whose tests take turns: they start many processes).

#[path = "../support/mod.rs"]
mod support;

mod memory;
mod redis;
