//! How a script call reaches Redis: an engine's Lua script (see [`crate::engine::lua`]) by EVALSHA; on NOSCRIPT, EVAL of the
//! body (which also caches it again). A call is retried only on answers proving the script did
//! not run (NOSCRIPT, MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN), never after a
//! lost reply: replaying a check could count it twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::Instant;

use super::connection::{Conn, Connections};
use crate::engine::lua::LuaScript;
use crate::error::{Error, Result};
use crate::runtime::block_on;

/// How long past its timeout a WAIT may end (see [`wait_for`]), with room for the reply.
const WAIT_OVERRUN: Duration = Duration::from_millis(150);

/// The most calls one batch carries: a batch holds the server for all of them (a few µs each).
pub(crate) const MAX_BATCH: usize = 128;

/// One EVALSHA running every call of `calls` (EVALSHA commands of one script, built with
/// [`LuaScript::evalsha`]) as a batch of the wrapper (`engine/wrapper.lua`); its reply holds one reply per call.
pub(crate) fn batch(calls: &[&Cmd]) -> Cmd {
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut shape: Vec<(usize, usize)> = Vec::with_capacity(calls.len());
    let mut args: Vec<&[u8]> = Vec::new();
    let mut sha: &[u8] = b"";
    for call in calls {
        let parts: Vec<&[u8]> = call
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(bytes) => Some(bytes),
                _ => None,
            })
            .collect();
        sha = parts[1];
        let key_count: usize = std::str::from_utf8(parts[2]).ok().and_then(|n| n.parse().ok()).unwrap_or(0);
        keys.extend(&parts[3..3 + key_count]);
        args.extend(&parts[3 + key_count..]);
        shape.push((key_count, parts.len() - 3 - key_count));
    }
    let mut cmd = Cmd::with_capacity(4 + keys.len() + 2 * shape.len() + args.len(), 64 * calls.len());
    cmd.arg("EVALSHA").arg(sha).arg(keys.len());
    for key in keys {
        cmd.arg(key);
    }
    let same_shape = shape.first().is_some_and(|first| shape.iter().all(|s| s == first));
    let arg_count = shape.first().map_or(0, |s| s.1);
    if same_shape && arg_count > 0 && args.chunks(arg_count).all(|call| call == &args[..arg_count]) {
        // Every call of one limiter with one cost (the usual batch): its arguments once.
        cmd.arg("batch-shared").arg(shape.len()).arg(shape[0].0).arg(arg_count);
        args.truncate(arg_count);
    } else if same_shape {
        cmd.arg("batch-same").arg(shape.len()).arg(shape[0].0).arg(shape[0].1);
    } else {
        cmd.arg("batch").arg(shape.len());
        for (key_count, arg_count) in shape {
            cmd.arg(key_count).arg(arg_count);
        }
    }
    for arg in args {
        cmd.arg(arg);
    }
    cmd
}

/// Whether answer `e` is retried (after a pause, within the deadline): answers proving the
/// script did not run are, however many came before. While a slot migrates the answers change
/// from node to node until it settles: ASK (followed at once), TRYAGAIN (the importing node
/// has only some of a script's keys, which move one by one), then MOVED once the slot is
/// reassigned; the deadline bounds them all.
fn retry_again(e: &RedisError) -> bool {
    did_not_run(e)
}

/// True for answers after which the script certainly did not run.
fn did_not_run(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::MasterDown
        )
    )
}

/// A failure Redis reported, or of the connection to it, as the error a call returns: a
/// refusal ([`rejection_code`]) is [`Error::BackendRejected`], anything else an outage.
pub(crate) fn redis_failure(e: &RedisError) -> Error {
    match rejection_code(e) {
        Some(code) => Error::BackendRejected { code: code.to_owned(), message: format!("Redis: {e}") },
        None => Error::BackendUnavailable { message: format!("Redis: {e}") },
    }
}

/// The code of an error reply by which Redis refuses a call for a reason that lasts until an
/// operator acts (permissions, credentials, memory, a script error); `None` for a failure of
/// the connection or an answer of a server that is between states (loading, failing over,
/// resharding, busy with a slow script), which the failure policy covers.
fn rejection_code(e: &RedisError) -> Option<&str> {
    match e.kind() {
        ErrorKind::AuthenticationFailed => Some(e.code().unwrap_or("WRONGPASS")),
        ErrorKind::Server(
            ServerErrorKind::ReadOnly
            | ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::NoScript,
        ) => None,
        ErrorKind::Server(kind) => Some(e.code().unwrap_or(kind_code(kind))),
        // Codes the client does not name: BUSY (a script runs too long) and NOREPLICAS (too few
        // replicas answer) pass; OOM, WRONGPASS, NOAUTH, WRONGTYPE, MISCONF... are refusals.
        ErrorKind::Extension => match e.code() {
            Some("BUSY" | "NOREPLICAS" | "UNBLOCKED") | None => None,
            Some(code) => Some(code),
        },
        _ => None,
    }
}

/// The reply code of a server error kind the client names.
fn kind_code(kind: ServerErrorKind) -> &'static str {
    match kind {
        ServerErrorKind::NoPerm => "NOPERM",
        ServerErrorKind::ExecAbort => "EXECABORT",
        ServerErrorKind::CrossSlot => "CROSSSLOT",
        _ => "ERR",
    }
}

/// True for READONLY: the server was demoted to replica (a failover). The connection is
/// dropped so the next call reconnects: where the address leads to the new primary (a DNS
/// name, a proxy, a cluster's slot map), that is what makes calls work again.
pub(crate) fn demoted(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// True when `e` says Redis did not answer in time: a socket timeout (`WouldBlock` on Unix,
/// `TimedOut` elsewhere), or the cluster client's failed initial connections, which keep only
/// the text of their cause.
pub(crate) fn is_timeout(e: &RedisError) -> bool {
    e.is_timeout() || (e.kind() == ErrorKind::Io && e.detail().is_some_and(|d| d.ends_with("timed out")))
}

/// True for failures that may have broken the connection.
fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// Runs `evalsha` (built with [`LuaScript::evalsha`]), returning the script's array of integers,
/// within `deadline`. `sent` is set once the call is handed to a connection: before that, a
/// failed or abandoned call certainly did not run.
pub(crate) async fn run_cmd(
    connections: &Arc<Connections>,
    deadline: Duration,
    script: &LuaScript,
    evalsha: Cmd,
    sent: &AtomicBool,
) -> Result<Vec<i64>> {
    if let Some(acks) = acks_for(connections, &evalsha) {
        return run_acked(connections, deadline, script, evalsha, sent, acks).await;
    }
    let until = Instant::now() + deadline;
    let timed_out = || connections.timeout(deadline);
    // While connected (nearly always) the connection is at hand: no timer is armed for it.
    let (mut conn, generation) = match connections.current() {
        Some(found) => found,
        None => tokio::time::timeout_at(until, connections.shared()).await.map_err(|_| timed_out())??,
    };
    sent.store(true, Ordering::Relaxed);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reply = match tokio::time::timeout_at(until, call(connections, &mut conn, &evalsha, script, until)).await {
            Ok(reply) => reply,
            Err(_) => {
                connections.invalidate(generation);
                return Err(timed_out());
            }
        };
        match reply {
            Ok(values) => return Ok(values),
            Err(e) if retry_again(&e) => {
                let pause = Instant::now() + retry_pause(attempt);
                tokio::time::sleep_until(pause.min(until)).await;
                if Instant::now() >= until {
                    return Err(timed_out());
                }
            }
            Err(e) => {
                if breaks_connection(&e) || demoted(&e) {
                    connections.invalidate(generation);
                }
                return Err(redis_failure(&e));
            }
        }
    }
}

/// The replicas a call of `evalsha` waits for: `None` without `replica_acks`, and for a peek,
/// which writes nothing.
fn acks_for(connections: &Connections, evalsha: &Cmd) -> Option<u32> {
    let acks = connections.replica_acks();
    (acks > 0 && !is_peek(evalsha)).then_some(acks)
}

/// True for a limiter script's peek: its first argument after the keys is the verb `peek`.
fn is_peek(evalsha: &Cmd) -> bool {
    let mut args = evalsha.args_iter().skip(2).filter_map(|a| match a {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let keys = args.next().and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok()).unwrap_or(0);
    args.nth(keys) == Some(b"peek".as_slice())
}

/// `WAIT acks timeout`, its timeout short of `left` by enough for its count to come back before
/// the call's deadline: Redis ends blocked commands only about ten times a second (`hz` 10), so
/// a WAIT may run up to 100 ms past its timeout. At least 1 ms: 0 would wait forever.
pub(crate) fn wait_for(acks: u32, left: Duration) -> Cmd {
    let margin = (left / 4).max(WAIT_OVERRUN);
    let millis = left.saturating_sub(margin).as_millis().max(1) as u64;
    redis::cmd("WAIT").arg(acks).arg(millis).to_owned()
}

/// Ok when the `WAIT` reply `acked` counts at least `acks` replicas (or no WAIT was sent). A
/// shortfall fails the call as unavailable, for the failure policy to decide (`fail_open` then
/// admits); it is never retried: the script ran, and its writes stand on the primary.
pub(crate) fn acknowledged(
    connections: &Connections,
    acks: Option<u32>,
    acked: Option<Value>,
    deadline: Duration,
) -> Result<()> {
    let (Some(acks), Some(acked)) = (acks, acked) else { return Ok(()) };
    let count = match acked.extract_error() {
        Ok(Value::Int(count)) => count,
        Ok(other) => {
            return Err(Error::BackendUnavailable { message: format!("Redis: WAIT answered {other:?}, not a count") })
        }
        Err(e) => return Err(redis_failure(&e)),
    };
    if count >= i64::from(acks) {
        return Ok(());
    }
    Err(Error::BackendUnavailable {
        message: format!(
            "Redis at {}: {count} of the {acks} replicas replica_acks asks for acknowledged the call's writes within \
             {deadline:?}; the call ran on the primary and is not retried",
            connections.servers()
        ),
    })
}

/// [`run_cmd`] for a call whose writes `acks` replicas must acknowledge: the script and its
/// `WAIT` go in one round trip on a dedicated connection (pooled), since a WAIT holds up every
/// call queued behind it on a connection and the shared one carries everyone's calls.
async fn run_acked(
    connections: &Arc<Connections>,
    deadline: Duration,
    script: &LuaScript,
    evalsha: Cmd,
    sent: &AtomicBool,
    acks: u32,
) -> Result<Vec<i64>> {
    let until = Instant::now() + deadline;
    let timed_out = || connections.timeout(deadline);
    let mut conn = tokio::time::timeout_at(until, connections.dedicated()).await.map_err(|_| timed_out())??;
    sent.store(true, Ordering::Relaxed);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let paired = async {
            let pair = |cmd: Cmd| {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd).add_command(wait_for(acks, until.saturating_duration_since(Instant::now())));
                pipe
            };
            let mut replies = conn.req_packed_commands(&pair(evalsha.clone()), 0, 2).await?;
            if matches!(&replies[0], Value::ServerError(e) if e.code() == "NOSCRIPT") {
                replies = conn.req_packed_commands(&pair(script.eval_of(&evalsha)), 0, 2).await?;
            }
            let acked = replies.pop().unwrap_or(Value::Nil);
            Ok::<_, RedisError>((parse(replies.pop().unwrap_or(Value::Nil))?, acked))
        };
        // A call that outlives its deadline drops its connection: the replies may still come.
        let reply = tokio::time::timeout_at(until, paired).await.map_err(|_| timed_out())?;
        match reply {
            Ok((values, acked)) => {
                connections.give_back(conn);
                return acknowledged(connections, Some(acks), Some(acked), deadline).map(|()| values);
            }
            Err(e) if retry_again(&e) => {
                tokio::time::sleep_until((Instant::now() + retry_pause(attempt)).min(until)).await;
                if Instant::now() >= until {
                    return Err(timed_out());
                }
            }
            Err(e) => {
                // A server's error reply leaves the connection between replies; a demoted
                // server's is dropped, so that the next call connects to the primary.
                if matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension) && !demoted(&e) {
                    connections.give_back(conn);
                }
                return Err(redis_failure(&e));
            }
        }
    }
}

/// How long to wait before retrying after answer number `attempt` proved the script did not
/// run: the cluster client may be refreshing its slot map, a server may be loading its data.
fn retry_pause(attempt: u32) -> Duration {
    Duration::from_millis(5 << attempt.min(4))
}

/// The blocking form of [`run_cmd`]: on a standalone server the calling thread sends the call on
/// a sync connection of its own (see [`super::sync_client`]); on a cluster it waits for the
/// runtime to run [`run_cmd`].
pub(crate) fn run_cmd_blocking(
    connections: &Arc<Connections>,
    deadline: Duration,
    script: &LuaScript,
    evalsha: Cmd,
    sent: &AtomicBool,
) -> Result<Vec<i64>> {
    let until = std::time::Instant::now() + deadline;
    let timed_out = || connections.timeout(deadline);
    let Some(mut conn) = connections.sync_connection(until, deadline)? else {
        return block_on(run_cmd(connections, deadline, script, evalsha, sent));
    };
    sent.store(true, Ordering::Relaxed);
    let acks = acks_for(connections, &evalsha);
    // The script, and the WAIT for its writes in the same write (one round trip).
    let mut request = |cmd: &Cmd| match acks {
        None => conn.request(cmd, until).and_then(parse).map(|values| (values, None)),
        Some(acks) => {
            let wait = wait_for(acks, until.saturating_duration_since(std::time::Instant::now()));
            let (reply, acked) = conn.request_pair(cmd, &wait, until)?;
            Ok((parse(reply)?, Some(acked)))
        }
    };
    // Each request is one round trip, noted while the caller traces (see `trace.rs`).
    let mut request = |cmd: &Cmd, command: &'static str| {
        let trip = crate::trace::start(command);
        let reply = request(cmd);
        crate::trace::end(trip, connections.servers(), reply.as_ref().err());
        reply
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reply = match request(&evalsha, "EVALSHA") {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                request(&script.eval_of(&evalsha), "EVAL")
            }
            other => other,
        };
        match reply {
            Ok((values, acked)) => {
                connections.give_back_sync(conn);
                return acknowledged(connections, acks, acked, deadline).map(|()| values);
            }
            Err(e) if retry_again(&e) => {
                let left = until.saturating_duration_since(std::time::Instant::now());
                std::thread::sleep(retry_pause(attempt).min(left));
                if std::time::Instant::now() >= until {
                    connections.give_back_sync(conn);
                    return Err(timed_out());
                }
            }
            // The connection is dropped: its reply may still arrive.
            Err(e) if is_timeout(&e) => return Err(timed_out()),
            Err(e) => {
                // Only a server's error reply leaves the connection between replies; one from a
                // demoted server is dropped, so that the next call reconnects.
                if matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension) && !demoted(&e) {
                    connections.give_back_sync(conn);
                }
                return Err(redis_failure(&e));
            }
        }
    }
}

async fn call(
    connections: &Arc<Connections>,
    conn: &mut Conn,
    evalsha: &Cmd,
    script: &LuaScript,
    until: Instant,
) -> redis::RedisResult<Vec<i64>> {
    // Each query is one round trip, noted while the calling thread traces (see `trace.rs`).
    let trip = crate::trace::start("EVALSHA");
    let reply = connections.query(conn, evalsha, until).await.and_then(parse);
    crate::trace::end(trip, connections.servers(), reply.as_ref().err());
    let reply = match reply {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            // The script cache was flushed (or this is a new server): EVAL runs and re-caches it.
            let trip = crate::trace::start("EVAL");
            let reply = script.eval_of(evalsha).query_async(conn).await;
            crate::trace::end(trip, connections.servers(), reply.as_ref().err());
            reply
        }
        other => other,
    };
    match (reply, conn) {
        (Err(e), Conn::Cluster(cluster)) if e.kind() == ErrorKind::Server(ServerErrorKind::Ask) => {
            follow_ask(cluster, &e, evalsha, script).await
        }
        (reply, _) => reply,
    }
}

/// Runs the call on the node an ASK redirect names (a slot being migrated, whose keys have
/// left the node that owns it): `ASKING` then the script, on that node. The cluster client,
/// built with no retries so that it never replays a call whose reply was lost, does not follow
/// redirects itself; an ASK proves the script did not run, so sending it on is safe.
async fn follow_ask(
    cluster: &mut redis::cluster_async::ClusterConnection,
    ask: &RedisError,
    evalsha: &Cmd,
    script: &LuaScript,
) -> redis::RedisResult<Vec<i64>> {
    let Some((host, port)) = ask.redirect_node().and_then(|(addr, _)| addr.rsplit_once(':')) else {
        return Err(ask.clone());
    };
    let Ok(port) = port.parse::<u16>() else { return Err(ask.clone()) };
    let route = SingleNodeRoutingInfo::ByAddress { host: host.to_owned(), port };
    let asking = |cmd: Cmd| {
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(cmd);
        pipe
    };
    let mut replies = cluster.route_pipeline(asking(evalsha.clone()), 1, 1, route.clone()).await?;
    match parse(replies.pop().unwrap_or(Value::Nil)) {
        // The importing node has never run this script: EVAL runs and caches it there.
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            let mut replies = cluster.route_pipeline(asking(script.eval_of(evalsha)), 1, 1, route).await?;
            parse(replies.pop().unwrap_or(Value::Nil))
        }
        other => other,
    }
}

/// What a script's reply says, for a caller that reads replies itself (see [`crate::driven`]).
pub(crate) enum ScriptReply {
    /// The script ran and answered.
    Values(Vec<i64>),
    /// The script certainly did not run (not cached, a redirect, the server loading): the
    /// call can run again.
    DidNotRun,
    /// Anything else.
    Failed(Error),
}

/// Reads one call's reply `value` (a batch's reply holds one per call).
pub(crate) fn interpret(value: Value) -> ScriptReply {
    match parse(value) {
        Ok(values) => ScriptReply::Values(values),
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) || did_not_run(&e) => ScriptReply::DidNotRun,
        Err(e) => ScriptReply::Failed(redis_failure(&e)),
    }
}

/// A script's reply as an array of integers, or the error it carries.
fn parse(value: Value) -> redis::RedisResult<Vec<i64>> {
    Ok(redis::from_redis_value(value.extract_error()?)?)
}
