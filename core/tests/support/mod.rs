//! The core's tests' support: the real Redis servers and waiting helpers of every suite
//! (`test-support`: started on free loopback ports, never 6379, stopped by pid when dropped; no
//! mocks), and the conformance vectors' runner.
#![allow(dead_code, unused_imports)]

pub mod vectors;

pub use ratekeeper_test_support::{
    free_port, scratch_dir, signal_pid, wait_until, Certificates, RedisCluster, RedisServer, SchedulingNoise, Watchdog,
    GIVE_UP,
};
