//! After `fork()` (gunicorn `--preload`, celery prefork) a child that uses backends its parent
//! already used works — with a runtime and connections of its own — and the parent keeps
//! working. Alone in its test binary: no other test threads are running when it forks.

mod support;

use std::time::Duration;

use ratekeeper::{Backend, RedisConfig};
use support::RedisServer;

#[test]
fn a_forked_child_uses_its_parents_backends_and_the_parent_keeps_working() {
    let server = RedisServer::start();
    let redis = Backend::redis_with(RedisConfig::new(server.url()).prefix("fork")).unwrap();
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
