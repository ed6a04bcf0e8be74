//! Holds (pauses and blocks, one mechanism with a role) across processes: a hold set by one
//! process is seen by the very next check of every other process that shares the Redis server,
//! for every kind, with no poll between them (issue #48: nothing a check skips may hide a hold).

use crate::support;

use std::time::Duration;

use ratekeeper::Backend;
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
    let one = Backend::redis_with(support::redis_config(server.url()).prefix("holds")).unwrap();
    let two = Backend::redis_with(support::redis_config(server.url()).prefix("holds")).unwrap();
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
