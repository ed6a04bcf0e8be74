//! Holds (pauses and blocks, one mechanism with a role) across processes: a hold set by one
//! process is seen by the very next check of every other process that shares the Redis server,
//! for every kind, with no poll between them (issue #48: nothing a check skips may hide a hold).

use crate::support;

use std::time::Duration;

use ratekeeper::{Backend, RedisConfig};
use support::RedisServer;

use super::block::every_kind;

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);

/// Two backends with connections of their own stand for two processes; the server's clock.
/// Each round: one process checks (admitted), the other holds the key, the first one's next
/// check is refused for about the hold's length; the hold ends and the next check is admitted.
#[test]
fn a_hold_set_by_one_process_is_seen_by_the_next_check_of_another() {
    let server = RedisServer::start();
    let one = Backend::redis_with(RedisConfig::new(server.url()).prefix("holds")).unwrap();
    let two = Backend::redis_with(RedisConfig::new(server.url()).prefix("holds")).unwrap();
    for (here, there) in every_kind(&one, "h").into_iter().zip(every_kind(&two, "h")) {
        let kind = format!("{:?}", there.kind());
        assert!(there.check_blocking(Some("k"), 1).unwrap().allowed, "{kind}: before any hold");

        here.pause_blocking(Some("k"), HOUR).unwrap();
        let paused = there.check_blocking(Some("k"), 1).unwrap();
        assert!(!paused.allowed && paused.retry_after > HOUR - MINUTE, "{kind}: paused elsewhere: {paused:?}");
        assert!(here.resume_blocking(Some("k")).unwrap(), "{kind}");
        assert!(there.check_blocking(Some("k"), 1).unwrap().allowed, "{kind}: resumed elsewhere");

        here.block_blocking(Some("k"), HOUR).unwrap();
        let blocked = there.check_blocking(Some("k"), 1).unwrap();
        assert!(!blocked.allowed && blocked.retry_after > HOUR - MINUTE, "{kind}: blocked elsewhere: {blocked:?}");
        let peeked = there.peek_blocking(Some("k")).unwrap();
        assert!(!peeked.allowed, "{kind}: a peek sees the block too: {peeked:?}");
        assert!(here.unblock_blocking(Some("k")).unwrap(), "{kind}");
        assert!(there.check_blocking(Some("k"), 1).unwrap().allowed, "{kind}: unblocked elsewhere");
    }
}

/// The token bucket's script reads the holds with its state (one `MGET` of the pause key, the
/// block key and the state) instead of an `EXISTS` of the holds and a `GET` of the state: one
/// `redis.call` fewer on every check of a bucket in use (issue #48). The hold is still read on every check (a hold
/// set by another process refuses the next one), and the state the check decides by is the one
/// read with the holds (a bucket of 2 refuses its third check).
#[test]
fn a_token_bucket_reads_its_holds_with_its_state_in_one_mget() {
    let server = RedisServer::start();
    let one = Backend::redis_with(RedisConfig::new(server.url()).prefix("fold")).unwrap();
    let two = Backend::redis_with(RedisConfig::new(server.url()).prefix("fold")).unwrap();
    let here = one.token_bucket("fold", 1.0 / 3600.0, 2).unwrap();
    let there = two.token_bucket("fold", 1.0 / 3600.0, 2).unwrap();
    let roomy = two.token_bucket("roomy", 1_000_000.0, 1_000_000_000).unwrap();
    assert!(roomy.check_blocking(Some("k"), 1).unwrap().allowed);

    let stats = support::commandstats_between_polls(&server, || {
        for _ in 0..5 {
            assert!(roomy.check_blocking(Some("k"), 1).unwrap().allowed);
        }
    });
    let calls = |cmd: &str| support::command_calls(&stats, cmd);
    assert_eq!(calls("evalsha") + calls("eval"), 5, "{stats}");
    assert_eq!(calls("mget"), 5, "one MGET per check: {stats}");
    assert_eq!(calls("exists") + calls("get"), 0, "no EXISTS, no GET: {stats}");
    assert_eq!(calls("set"), 5, "{stats}");

    assert!(there.check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(there.check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(!there.check_blocking(Some("k"), 1).unwrap().allowed, "the state read with the holds counts");
    assert!(!there.peek_blocking(Some("k")).unwrap().allowed, "a peek reads it the same way");
    here.pause_blocking(Some("j"), HOUR).unwrap();
    let paused = there.check_blocking(Some("j"), 1).unwrap();
    assert!(!paused.allowed && paused.retry_after > HOUR - MINUTE, "paused elsewhere: {paused:?}");
    assert!(here.resume_blocking(Some("j")).unwrap());
    assert!(there.check_blocking(Some("j"), 1).unwrap().allowed, "resumed elsewhere");
}
