//! Settle ids after `fork()` (gunicorn `--preload`, Puma preload, Sidekiq swarm): children
//! forked from one parent inherit its id prefix and counter, yet each child's settles must
//! apply: a repeated id would be skipped as a retry. Alone in its test binary: no other test
//! threads are running when it forks.

mod support;

use ratekeeper::{Backend, RedisConfig};
use support::RedisServer;

/// Two children of one parent each check 100 and settle to 1000 on a shared Redis bucket of
/// 10,000: both settles apply (8,000 left), none is taken for the other's repeat.
#[test]
fn children_forked_from_one_parent_settle_with_ids_of_their_own() {
    let server = RedisServer::start();
    let redis = Backend::redis_with(RedisConfig::new(server.url()).prefix("settle-fork")).unwrap();
    let bucket = redis.token_bucket("forked", 0.001, 10_000).unwrap();
    // The parent makes a ticket first, so that its id prefix and counter exist before it forks.
    let own = bucket.check_blocking(Some("parent"), 1).unwrap();
    assert!(own.settle.is_some());
    for _ in 0..2 {
        // SAFETY: the child only runs ratekeeper calls and leaves with _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let decision = bucket.check_blocking(Some("shared"), 100)?;
                bucket.settle_blocking(&decision, 1000).map(|d| d.remaining)
            }));
            let code = match outcome {
                Ok(Ok(_)) => 0,
                other => {
                    eprintln!("child: {other:?}");
                    1
                }
            };
            // SAFETY: leaving the child without running the parent's destructors or test harness.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child we just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "a child failed: status {status}");
    }
    let left = bucket.peek_blocking(Some("shared")).unwrap().remaining;
    assert_eq!(left, 8_000, "two children each charged 1,000: a child's settle was skipped as the other's repeat");
}
