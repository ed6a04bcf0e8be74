//! After `fork()` (gunicorn `--preload`, celery prefork, Puma preload, Sidekiq swarm): a child
//! that uses backends its parent already used works — with a runtime and connections of its
//! own — and the parent keeps working; children forked from one parent settle with ids of their
//! own. Alone in its test binary, and its tests take turns ([`forking`]): no other test is running
//! when one forks.

mod support;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ratekeeper::Backend;
use support::RedisServer;

/// Held by each test of this file for its whole run: one forks while the other waits on this
/// lock, having started nothing.
fn forking() -> MutexGuard<'static, ()> {
    static FORKING: Mutex<()> = Mutex::new(());
    FORKING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn a_forked_child_uses_its_parents_backends_and_the_parent_keeps_working() {
    let _forking = forking();
    let server = RedisServer::start();
    let redis = Backend::redis_with(support::redis_config(server.url()).prefix("fork")).unwrap();
    let shared = redis.bucket("forked", 10, Duration::from_secs(3600)).unwrap();
    let local = Backend::memory().token_bucket("local", 1.0, 5).unwrap();
    // The parent has a runtime, a connection and state before it forks.
    assert_eq!(shared.check_blocking(None, 1).unwrap().remaining, 9);
    assert_eq!(local.check_blocking(None, 1).unwrap().remaining, 4);

    // SAFETY: the child only runs ratekeeper calls and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let remote = shared.check_blocking(None, 2).map(|d| d.remaining);
            let memory = local.check_blocking(None, 1).map(|d| d.remaining);
            (remote, memory)
        }));
        // The child sees the shared Redis state and its own copy of the memory state.
        let code = match outcome {
            Ok((Ok(7), Ok(3))) => 0,
            Ok((remote, memory)) => {
                eprintln!("child: redis {remote:?}, memory {memory:?}");
                1
            }
            Err(_) => 2,
        };
        // SAFETY: leaving the child without running the parent's destructors or test harness.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child we just forked.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status), "the child did not exit normally: status {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's calls failed (see its stderr above)");

    // The parent's runtime and connection still work, and it sees the child's admissions.
    assert_eq!(shared.check_blocking(None, 1).unwrap().remaining, 6);
    assert_eq!(local.check_blocking(None, 1).unwrap().remaining, 3, "the child's memory state is its own");
}

/// Two children of one parent each check 100 and settle to 1000 on a shared Redis bucket of
/// 10,000: both settles apply (8,000 left), none is taken for the other's repeat.
#[test]
fn children_forked_from_one_parent_settle_with_ids_of_their_own() {
    let _forking = forking();
    let server = RedisServer::start();
    let redis = Backend::redis_with(support::redis_config(server.url()).prefix("settle-fork")).unwrap();
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
