//! What every test suite of ratekeeper shares: real `redis-server` processes (standalone, a
//! 3-master Redis Cluster with or without replicas, a Sentinel group, TLS with certificates from
//! a fresh CA) started on free loopback ports
//! (never 6379) and stopped by pid, and the over-admission judge.
//!
//! The Rust tests use this library directly; the Python, Node and Ruby fixtures run its binary,
//! `rk-test-redis` (`start`, `launch`, `stop`, `judge`), so that there is one fixture and one
//! judge for all four suites. No mocks: the servers are real.

pub mod cluster;
pub mod judge;
pub mod ports;
pub mod sentinel;
pub mod server;
pub mod timing;
pub mod tls;

pub use cluster::RedisCluster;
pub use ports::{free_port, scratch_dir};
pub use sentinel::SentinelGroup;
pub use server::{signal_pid, DetachedServer, RedisServer};
pub use timing::{wait_until, SchedulingNoise, Watchdog, GIVE_UP};
pub use tls::Certificates;
