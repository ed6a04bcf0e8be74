//! Driven calls (`ratekeeper::driven`): a caller that drives its own socket gets the command
//! bytes from a `Pipeline`, feeds it what it reads, and gets each call's decision, exactly as
//! the async call would decide it; a flushed script cache asks for a rerun; a failed connection
//! goes through the failure policy. The socket here is a plain blocking `TcpStream`.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ratekeeper::driven::{Driven, DrivenCall, Finished, Pipeline};
use ratekeeper::{block_on, Backend, Error, ErrorKind, FailurePolicy, Limiter, RedisConfig};
use support::{RedisCluster, RedisServer};

fn driven(limiter: &Limiter, key: &str, cost: u64) -> DrivenCall {
    match limiter.drive_check(Some(key), cost).expect("valid arguments") {
        Driven::Send(call) => call,
        Driven::Done(_) => panic!("a Redis limiter answered without Redis"),
        Driven::Unsupported => panic!("a standalone plain server is driven"),
    }
}

/// Writes the queued calls and reads until `expected` calls ended.
fn exchange(stream: &mut TcpStream, pipeline: &mut Pipeline<usize>, expected: usize) -> Vec<(usize, Finished)> {
    let mut out = Vec::new();
    pipeline.write_queued(&mut out);
    stream.write_all(&out).unwrap();
    let mut done = Vec::new();
    let mut buffer = [0u8; 512]; // small: replies arrive split across reads
    while done.len() < expected {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "the server closed the connection");
        pipeline.read(&buffer[..n], &mut done).unwrap();
    }
    assert!(!pipeline.awaiting_replies());
    done
}

#[test]
fn driven_calls_are_decided_like_async_calls_in_order_and_in_batches() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    let limiter = backend.token_bucket("driven", 0.001, 10).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    let first = driven(&limiter, "k", 1);
    let mut stream = first.endpoint().connect().unwrap();
    let mut pipeline = Pipeline::new();
    pipeline.push(0, first);
    for token in 1..15 {
        pipeline.push(token, driven(&limiter, "k", 1));
    }
    pipeline.push(
        15,
        match limiter.drive_peek(Some("k")).unwrap() {
            Driven::Send(call) => call,
            _ => panic!("peek is driven"),
        },
    );
    assert!(pipeline.next_deadline().is_some());
    server.cli(&["CONFIG", "RESETSTAT"]);
    let done = exchange(&mut stream, &mut pipeline, 16);
    let stats = server.cli(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_evalsha:calls=1,"), "16 calls of one script, one invocation:\n{stats}");

    let decisions: Vec<_> = done
        .into_iter()
        .map(|(token, finished)| match finished {
            Finished::Done(result) => (token, result.expect("Redis answers")),
            Finished::Rerun(_) => panic!("the script is cached"),
        })
        .collect();
    assert_eq!(decisions.iter().map(|(t, _)| *t).collect::<Vec<_>>(), (0..16).collect::<Vec<_>>(), "in order");
    for (token, d) in &decisions[..10] {
        assert!(d.allowed && d.remaining == 9 - *token as u64, "call {token}: {d:?}");
    }
    for (token, d) in &decisions[10..15] {
        assert!(!d.allowed && d.retry_after > Duration::ZERO, "call {token}: {d:?}");
    }
    assert!(!decisions[15].1.allowed && decisions[15].1.remaining == 0, "the peek sees the bucket empty");
    // The async call agrees: the state the driven calls left is the server's.
    assert!(!block_on(limiter.check(Some("k"), 1)).unwrap().allowed);
}

#[test]
fn a_flushed_script_cache_asks_for_a_rerun_on_the_runtime() {
    let server = RedisServer::start();
    let backend = Backend::redis(&server.url()).unwrap();
    let limiter = backend.token_bucket("flushed", 1.0, 5).unwrap();
    assert!(limiter.check_blocking(Some("warm"), 1).unwrap().allowed);
    server.cli(&["SCRIPT", "FLUSH"]);
    let call = driven(&limiter, "k", 2);
    let mut stream = call.endpoint().connect().unwrap();
    let mut pipeline = Pipeline::new();
    pipeline.push((), call);
    pipeline.push((), driven(&limiter, "k", 2)); // a batch: NOSCRIPT answers both
    let mut out = Vec::new();
    pipeline.write_queued(&mut out);
    stream.write_all(&out).unwrap();
    let mut done = Vec::new();
    let mut buffer = [0u8; 4096];
    while done.len() < 2 {
        let n = stream.read(&mut buffer).unwrap();
        pipeline.read(&buffer[..n], &mut done).unwrap();
    }
    let mut remaining = Vec::new();
    for (_, finished) in done {
        let Finished::Rerun(call) = finished else { panic!("NOSCRIPT proves the script did not run") };
        remaining.push(block_on(call.run()).unwrap().remaining);
    }
    remaining.sort_unstable();
    assert_eq!(remaining, [1, 3], "each rerun counted once");
}

#[test]
fn a_failed_connection_goes_through_the_failure_policy() {
    let server = RedisServer::start();
    let config = |policy| RedisConfig::new(server.url()).failure_policy(policy);
    let closed = Backend::redis_with(config(FailurePolicy::FailClosed)).unwrap().token_bucket("f", 1.0, 5).unwrap();
    let open = Backend::redis_with(config(FailurePolicy::FailOpen)).unwrap().token_bucket("f", 1.0, 5).unwrap();
    let mut pipeline = Pipeline::new();
    pipeline.push("closed", driven(&closed, "k", 1));
    pipeline.push("open", driven(&open, "k", 1));
    let mut done = Vec::new();
    let timeout = Error::Timeout { message: "the test's deadline".into() };
    pipeline.fail_all(&timeout, &mut done);
    assert!(pipeline.next_deadline().is_none() && !pipeline.has_queued());
    let results: Vec<_> = done
        .into_iter()
        .map(|(token, f)| match f {
            Finished::Done(result) => (token, result),
            Finished::Rerun(_) => panic!("a failure is not a rerun"),
        })
        .collect();
    assert_eq!(results[0].0, "closed");
    assert_eq!(results[0].1.as_ref().unwrap_err().kind(), ErrorKind::Timeout);
    let opened = results[1].1.as_ref().unwrap();
    assert!(opened.allowed && opened.remaining == 5, "fail_open allows with full capacity: {opened:?}");
}

#[test]
fn what_is_not_driven_says_so_and_bad_arguments_fail_first() {
    let memory = Backend::memory().token_bucket("m", 1.0, 5).unwrap();
    assert!(matches!(memory.drive_check(Some("k"), 1).unwrap(), Driven::Done(d) if d.allowed && d.remaining == 4));

    let server = RedisServer::start();
    let redis = Backend::redis(&server.url()).unwrap();
    let lease = redis.concurrent("c", 1, Duration::from_secs(5)).unwrap();
    assert!(matches!(lease.drive_check(Some("k"), 1).unwrap(), Driven::Unsupported));
    let bucket = redis.token_bucket("b", 1.0, 5).unwrap();
    let error = bucket.drive_check(Some("k"), 6).err().expect("a cost above the capacity");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(bucket.drive_check(Some(&"x".repeat(2000)), 1).is_err(), "an over-long key");
    assert_eq!(server.cli(&["DBSIZE"]), "0", "nothing was written");

    let cluster = RedisCluster::start();
    let clustered = Backend::redis_cluster(cluster.seeds()).unwrap().token_bucket("b", 1.0, 5).unwrap();
    assert!(matches!(clustered.drive_check(Some("k"), 1).unwrap(), Driven::Unsupported));
}

#[test]
fn each_call_keeps_its_own_deadline_and_a_late_reply_is_dropped() {
    let server = RedisServer::start();
    let with_deadline = |ms| {
        let config = RedisConfig::new(server.url()).deadline(Duration::from_millis(ms));
        Backend::redis_with(config).unwrap().token_bucket("deadlines", 0.001, 5).unwrap()
    };
    let (short, long) = (with_deadline(100), with_deadline(5000));
    assert!(long.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    let first = driven(&long, "k", 1);
    let mut stream = first.endpoint().connect().unwrap();
    let mut pipeline = Pipeline::new();
    pipeline.push("long", first);
    pipeline.push("short", driven(&short, "k", 1)); // the same script: one batch
    let mut out = Vec::new();
    pipeline.write_queued(&mut out);
    stream.write_all(&out).unwrap();

    // The short deadline passes before the reply is read: only that call ends.
    let mut done = Vec::new();
    assert!(pipeline.expire(std::time::Instant::now() + Duration::from_millis(150), &mut done));
    assert_eq!(done.len(), 1);
    let (token, Finished::Done(result)) = done.pop().unwrap() else { panic!("a timeout is not a rerun") };
    assert_eq!((token, result.unwrap_err().kind()), ("short", ErrorKind::Timeout));
    assert!(pipeline.has_waiting_calls() && pipeline.next_deadline().is_some());

    // The batch's reply answers the long call; the short call's share is dropped.
    let mut buffer = [0u8; 4096];
    while pipeline.awaiting_replies() {
        let n = stream.read(&mut buffer).unwrap();
        pipeline.read(&buffer[..n], &mut done).unwrap();
    }
    assert_eq!(done.len(), 1);
    let (token, Finished::Done(result)) = done.pop().unwrap() else { panic!("the script is cached") };
    let decision = result.expect("answered within the long deadline");
    assert_eq!(token, "long");
    assert!(decision.allowed && decision.remaining == 4, "{decision:?}");
    assert!(!pipeline.has_waiting_calls() && pipeline.next_deadline().is_none());
    let after = long.check_blocking(Some("k"), 1).unwrap();
    assert_eq!(after.remaining, 2, "the timed-out call ran on the server too (its reply came late)");
}

#[test]
fn a_queued_call_run_on_the_runtime_keeps_its_deadline() {
    let server = RedisServer::start();
    let config = RedisConfig::new(server.url()).deadline(Duration::from_millis(200));
    let limiter = Backend::redis_with(config).unwrap().token_bucket("kept", 1.0, 5).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the server answers");
    let mut pipeline = Pipeline::new();
    pipeline.push("queued", driven(&limiter, "k", 1));
    std::thread::sleep(Duration::from_millis(250)); // its deadline passes while it is queued
    let mut taken = pipeline.take_queued();
    assert_eq!(taken.len(), 1);
    assert!(!pipeline.has_waiting_calls());
    let (token, call) = taken.pop().unwrap();
    let result = block_on(call.run());
    assert_eq!(token, "queued");
    // The server answers (the warm-up), so only the expired deadline can make this a Timeout: a
    // fresh deadline on the runtime would have let it succeed. No latency bound is needed.
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Timeout, "no fresh deadline on the runtime");
    // A call that was never queued gets the backend's deadline as usual.
    assert!(block_on(driven(&limiter, "k", 1).run()).unwrap().allowed);
}

#[test]
fn a_readonly_reply_marks_the_connection_demoted() {
    // A failover demoted the server: its connection must be replaced (Node drains it), not
    // kept sending calls a replica refuses.
    let primary = RedisServer::start();
    let other = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(primary.url()).deadline(Duration::from_secs(5))).unwrap();
    let limiter = backend.token_bucket("demoted", 1.0, 10).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    let first = driven(&limiter, "k", 1);
    let mut stream = first.endpoint().connect().unwrap();
    let mut pipeline = Pipeline::new();
    pipeline.push(0, first);
    let done = exchange(&mut stream, &mut pipeline, 1);
    assert!(matches!(&done[0].1, Finished::Done(Ok(d)) if d.allowed), "a primary answers");
    assert!(!pipeline.demoted(), "a primary's reply does not demote");

    primary.cli(&["REPLICAOF", "127.0.0.1", &other.port.to_string()]);
    for token in 1..4 {
        pipeline.push(token, driven(&limiter, "k", 1));
    }
    let done = exchange(&mut stream, &mut pipeline, 3);
    for (token, finished) in &done {
        match finished {
            Finished::Done(Err(e)) => assert_eq!(e.kind(), ErrorKind::BackendUnavailable, "call {token}: {e}"),
            Finished::Done(Ok(d)) => panic!("call {token} of a replica was decided: {d:?}"),
            Finished::Rerun(_) => panic!("call {token} of a replica asked for a rerun"),
        }
    }
    assert!(pipeline.demoted(), "a READONLY reply (here in a batch) says the connection is demoted");
    primary.cli(&["REPLICAOF", "NO", "ONE"]);
}

#[test]
fn a_driven_call_goes_through_the_deny_cache_like_the_async_call() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    let limiter = backend.token_bucket("denied", 0.001, 1).unwrap().with_deny_cache(true).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    let first = driven(&limiter, "k", 1);
    let mut stream = first.endpoint().connect().unwrap();
    let mut pipeline = Pipeline::new();
    pipeline.push(0, first);
    pipeline.push(1, driven(&limiter, "k", 1));
    let done = exchange(&mut stream, &mut pipeline, 2);
    let allowed: Vec<bool> = done
        .into_iter()
        .map(|(_, finished)| match finished {
            Finished::Done(d) => d.unwrap().allowed,
            Finished::Rerun(_) => panic!("the script is cached"),
        })
        .collect();
    assert_eq!(allowed, [true, false]);
    // The refusal Redis decided is remembered: the next driven check is answered here.
    match limiter.drive_check(Some("k"), 1).unwrap() {
        Driven::Done(d) => assert!(!d.allowed && d.retry_after > Duration::ZERO, "{d:?}"),
        _ => panic!("a remembered refusal is answered without Redis"),
    }
    let m = limiter.metrics();
    assert_eq!((m.allowed, m.refused, m.refused_locally), (2, 2, 1), "{m:?}");
    // The warm-up and both driven calls went to Redis, the remembered refusal did not.
    assert_eq!(m.latency_count(), 3, "a latency per call that went to Redis: {m:?}");
}

#[test]
fn batches_written_before_the_previous_reply_are_answered_in_order_and_a_drop_fails_each_call_once() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(30))).unwrap();
    let limiter = backend.token_bucket("in-flight", 0.001, 10).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    let first = driven(&limiter, "k", 1);
    let mut stream = first.endpoint().connect().unwrap();
    let mut pipeline = Pipeline::new();

    // Two writes, the second before the first's reply: one reply each, in order.
    let mut out = Vec::new();
    pipeline.push(0, first);
    pipeline.push(1, driven(&limiter, "k", 1));
    pipeline.write_queued(&mut out);
    assert_eq!(pipeline.writes_in_flight(), 1);
    pipeline.push(2, driven(&limiter, "k", 1));
    pipeline.write_queued(&mut out);
    assert_eq!(pipeline.writes_in_flight(), 2, "a write before the previous reply is one more in flight");
    pipeline.write_queued(&mut out);
    assert_eq!(pipeline.writes_in_flight(), 2, "writing nothing is not a write in flight");
    stream.write_all(&out).unwrap();
    let mut done = Vec::new();
    let mut buffer = [0u8; 64]; // small: replies arrive split across reads
    while done.len() < 3 {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "the server closed the connection");
        pipeline.read(&buffer[..n], &mut done).unwrap();
    }
    assert_eq!(pipeline.writes_in_flight(), 0);
    let remaining: Vec<(usize, u64)> = done
        .drain(..)
        .map(|(token, finished)| match finished {
            Finished::Done(result) => (token, result.expect("Redis answers").remaining),
            Finished::Rerun(_) => panic!("the script is cached"),
        })
        .collect();
    assert_eq!(remaining, [(0, 9), (1, 8), (2, 7)], "each reply went to its own call, in order");

    // The server holds two writes (a write pause holds scripts) and one call is still queued when
    // the connection is killed: every call ends once, with the connection's error, and none ran.
    server.cli(&["CLIENT", "PAUSE", "30000", "WRITE"]);
    let mut out = Vec::new();
    pipeline.push(10, driven(&limiter, "k", 1));
    pipeline.push(11, driven(&limiter, "k", 1));
    pipeline.write_queued(&mut out);
    pipeline.push(12, driven(&limiter, "k", 1));
    pipeline.write_queued(&mut out);
    pipeline.push(13, driven(&limiter, "k", 1));
    assert_eq!(pipeline.writes_in_flight(), 2);
    stream.write_all(&out).unwrap();
    server.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    let error = loop {
        match stream.read(&mut buffer) {
            Ok(0) => break Error::BackendUnavailable { message: "Redis closed the connection".into() },
            Ok(n) => pipeline.read(&buffer[..n], &mut done).unwrap(),
            Err(e) => break Error::BackendUnavailable { message: e.to_string() },
        }
    };
    assert!(done.is_empty(), "a paused server answered nothing");
    pipeline.fail_all(&error, &mut done);
    server.cli(&["CLIENT", "UNPAUSE"]);
    let mut tokens: Vec<usize> = done
        .into_iter()
        .map(|(token, finished)| match finished {
            Finished::Done(Err(e)) => {
                assert_eq!(e.kind(), ErrorKind::BackendUnavailable, "call {token}: {e}");
                token
            }
            Finished::Done(Ok(d)) => panic!("call {token} was decided on a dropped connection: {d:?}"),
            Finished::Rerun(_) => panic!("call {token} may have run: it must not run again"),
        })
        .collect();
    tokens.sort_unstable();
    assert_eq!(tokens, [10, 11, 12, 13], "every call ends exactly once");
    assert_eq!(pipeline.writes_in_flight(), 0);
    assert!(!pipeline.has_waiting_calls() && !pipeline.awaiting_replies());
    assert_eq!(block_on(limiter.peek(Some("k"))).unwrap().remaining, 7, "no call of the killed connection ran");
}

#[test]
fn a_traced_pipeline_notes_each_round_trip_with_the_calls_it_ended_and_an_untraced_one_none() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    let limiter = backend.token_bucket("traced", 0.001, 10).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    let first = driven(&limiter, "k", 1);
    let mut stream = first.endpoint().connect().unwrap();
    let mut pipeline = Pipeline::new();
    pipeline.push(0, first);
    exchange(&mut stream, &mut pipeline, 1);
    assert!(pipeline.take_round_trips().is_empty(), "untraced: nothing noted");

    pipeline.trace(true);
    for token in 0..3 {
        pipeline.push(token, driven(&limiter, "k", 1));
    }
    let done = exchange(&mut stream, &mut pipeline, 3);
    let trips = pipeline.take_round_trips();
    assert_eq!(trips.len(), 1, "one batched command: {trips:?}");
    assert_eq!((trips[0].calls.clone(), trips[0].batch), (0..3, 3));
    assert_eq!(done.len(), 3);
    let trip = &trips[0].trip;
    assert_eq!((trip.command, trip.error.as_deref()), ("EVALSHA", None));
    assert_eq!(trip.server, Some(("127.0.0.1".to_owned(), server.port)));
    assert!(trip.end >= trip.start);
    assert!(pipeline.take_round_trips().is_empty(), "taken once");

    // Written, then the connection fails: the round trip ends with `io`.
    pipeline.push(7, driven(&limiter, "k", 1));
    let mut out = Vec::new();
    pipeline.write_queued(&mut out);
    let mut done = Vec::new();
    pipeline.fail_all(&Error::BackendUnavailable { message: "dropped".into() }, &mut done);
    let trips = pipeline.take_round_trips();
    assert_eq!(trips.len(), 1);
    assert_eq!((trips[0].calls.clone(), trips[0].trip.error.as_deref()), (0..1, Some("io")));

    pipeline.trace(false);
    pipeline.push(8, driven(&limiter, "k", 1));
    exchange(&mut stream, &mut pipeline, 1);
    assert!(pipeline.take_round_trips().is_empty(), "untraced again");
}
