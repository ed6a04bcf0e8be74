//! Free loopback ports and scratch directories for the servers.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every scratch directory, which `rk-test-redis stop` checks before removing one.
pub const SCRATCH_PREFIX: &str = "ratekeeper-test-";

/// A port nobody listens on now, with its cluster bus port (+10000) free too, never 6379.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        if port != 6379 && port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A new directory under the system's temporary directory, named for `label` and unique to this
/// process and call.
pub fn scratch_dir(label: &str) -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{SCRATCH_PREFIX}{}-{label}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}
