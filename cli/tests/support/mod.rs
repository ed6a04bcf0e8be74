//! The CLI's tests: the real Redis servers of every suite (`test-support`, shared rather than
//! copied: started on free loopback ports, never 6379, stopped by pid when dropped),
//! and the built `ratekeeper` binary, run against them.
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use ratekeeper_test_support::{free_port, scratch_dir, wait_until, RedisCluster, RedisServer, SentinelGroup};

/// The built `ratekeeper` binary, with no RATEKEEPER_* variables from the environment.
pub fn ratekeeper() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    cmd.env_remove("RATEKEEPER_REDIS_URL").env_remove("RATEKEEPER_TOKEN").stdin(Stdio::null());
    cmd
}

/// Runs `ratekeeper ARGS` and returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } = ratekeeper().args(args).output().expect("run ratekeeper");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Replaces what changes from run to run ("12s ago", host names) with fixed text.
pub fn mask(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_inclusive(' ') {
        let trimmed = word.trim_end();
        if trimmed.len() > 1
            && trimmed.ends_with('s')
            && trimmed[..trimmed.len() - 1].chars().all(|c| c.is_ascii_digit())
        {
            out.push_str(&word.replace(trimmed, "Ns"));
        } else {
            out.push_str(word);
        }
    }
    out
}
