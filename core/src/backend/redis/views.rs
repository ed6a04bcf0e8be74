//! What an operator reads of a limiter's raw state in Redis (see [`crate::views`]): a
//! concurrent key's holders and waiters (one read-only script on the key's slot), the keys a
//! limiter holds state for (SCAN on every master of a Cluster) and the per-minute history that
//! the metrics flush writes.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use super::connection::Conn;
use super::keys::KeyBuilder;
use super::{evalsha, RedisBackend};
use crate::engine::concurrent::holder_view;
use crate::engine::Kind;
use crate::error::{Error, Result};
use crate::views::{ConcurrentUse, MinuteCounts, HISTORY_MINUTES, MAX_HOLDERS_SHOWN, MAX_SCANNED_PER_MASTER};

/// `{now, held, waiters, then (lease id, expiry, 'token granted_at' or '') per holder}`, all as
/// strings, read atomically. KEYS: holders, grants, waiters; ARGV: now ('' for the server's
/// TIME), the most holders to list (earliest expiry first).
const HOLDERS_SCRIPT: &str = r#"
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local fmt = function(x) return string.format('%d', x) end
local out = {fmt(now), fmt(redis.call('ZCARD', KEYS[1])), fmt(redis.call('ZCOUNT', KEYS[3], '(' .. fmt(now), '+inf'))}
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1, 'WITHSCORES')
for i = 1, #ids, 2 do
  out[#out + 1] = ids[i]
  out[#out + 1] = ids[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], ids[i]) or ''
end
return out
"#;

/// `{now_us, field, value, ...}` of a history hash, read atomically with the server's clock.
const HISTORY_SCRIPT: &str = r#"
local t = redis.call('TIME')
return {string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), redis.call('HGETALL', KEYS[1])}
"#;

/// Keys per SCAN call.
const SCAN_COUNT: usize = 1_000;

impl RedisBackend {
    /// The holders and waiters of `key` of concurrent limiter `name`.
    pub(crate) async fn concurrent_use(
        &self,
        name: &str,
        key: &str,
        colocate: crate::engine::Colocate,
    ) -> Result<ConcurrentUse> {
        let keys = KeyBuilder::for_limiter(&self.prefix, Kind::Concurrent, name, key, colocate);
        let mut eval = redis::cmd("EVAL");
        eval.arg(HOLDERS_SCRIPT).arg(3).arg(keys.key("h")).arg(keys.key("g")).arg(keys.key("q"));
        match self.manual_clock.as_ref().map(|clock| clock.now_micros()) {
            Some(now) => eval.arg(now),
            None => eval.arg(""),
        };
        eval.arg(MAX_HOLDERS_SHOWN);
        let mut pipe = redis::pipe();
        pipe.add_command(eval);
        let (reply,): (Vec<String>,) = self.query(&pipe).await?;
        let number = |s: &str| s.parse::<u64>().map_err(|_| malformed_reply("holders", &reply));
        let [now, held, waiters, rest @ ..] = reply.as_slice() else { return Err(malformed_reply("holders", &reply)) };
        let now = number(now)?;
        let mut out = ConcurrentUse { held: number(held)?, waiters: number(waiters)?, ..ConcurrentUse::default() };
        for holder in rest.chunks_exact(3) {
            let grant = holder[2].split_once(' ').and_then(|(t, g)| Some((t.parse().ok()?, g.parse().ok()?)));
            out.holders.push(holder_view(&holder[0], grant, number(&holder[1])?, now));
        }
        // Oldest grant first; holders of an earlier version (no grant recorded) last.
        out.holders.sort_by_key(|h| (h.age.is_none(), std::cmp::Reverse(h.age), h.fencing_token));
        Ok(out)
    }

    /// Up to `max` keys for which limiter (`kind`, `name`) holds state in key `role`, found by
    /// SCAN on every master (at most [`MAX_SCANNED_PER_MASTER`] keys walked on each).
    pub(crate) async fn keys_of(&self, kind: Kind, name: &str, role: &str, max: usize) -> Result<Vec<String>> {
        let pattern = format!("{}:{{*}}:{}:{name}:{role}:*", self.prefix, kind.as_str());
        // `<prefix>:{<16 hex digits>}:` then `<kind>:<name>:<role>:`, then the key.
        let tag_end = self.prefix.len() + 2 + 16 + 2;
        let head = format!("{}:{name}:{role}:", kind.as_str());
        let user_key = |redis_key: &str| -> Option<String> {
            let rest = redis_key.get(tag_end..)?;
            (redis_key.as_bytes().get(tag_end - 2..tag_end) == Some(b"}:"))
                .then(|| rest.strip_prefix(head.as_str()).map(str::to_owned))
                .flatten()
        };
        let until = tokio::time::Instant::now() + self.deadline;
        let (conn, _) = tokio::time::timeout_at(until, self.connections.shared())
            .await
            .map_err(|_| self.connections.timeout(self.deadline))??;
        let mut found = Vec::new();
        for master in self.masters(&conn).await? {
            let mut cursor = 0u64;
            let mut walked = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(SCAN_COUNT);
                let (next, keys): (u64, Vec<String>) = self.on_master(&conn, master.as_ref(), scan).await?;
                found.extend(keys.iter().filter_map(|k| user_key(k)));
                walked += SCAN_COUNT;
                cursor = next;
                if cursor == 0 || found.len() >= max || walked >= MAX_SCANNED_PER_MASTER {
                    break;
                }
            }
            if found.len() >= max {
                break;
            }
        }
        // SCAN may return a key twice (when the table grows during the walk).
        found.sort();
        found.dedup();
        found.truncate(max);
        Ok(found)
    }

    /// The masters to scan: `None` for a standalone server; each master's `(host, port)` on a
    /// Cluster, as the client's slot map has them.
    async fn masters(&self, conn: &Conn) -> Result<Vec<Option<(String, u16)>>> {
        let Conn::Cluster(cluster) = conn else { return Ok(vec![None]) };
        let mut cluster = cluster.clone();
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply = tokio::time::timeout(self.deadline, cluster.route_command(redis::cmd("PING"), routing))
            .await
            .map_err(|_| self.connections.timeout(self.deadline))?
            .map_err(|e| evalsha::redis_failure(&e))?;
        let Value::Map(nodes) = reply else {
            return Err(Error::BackendUnavailable {
                message: format!("Redis: unexpected reply to a PING of every master: {reply:?}"),
            });
        };
        let mut out = Vec::new();
        for (address, _) in nodes {
            let address: String = redis::from_redis_value(address).map_err(parse_failure)?;
            let (host, port) =
                address.rsplit_once(':').and_then(|(h, p)| Some((h.to_owned(), p.parse().ok()?))).ok_or_else(|| {
                    Error::BackendUnavailable { message: format!("Redis: unexpected master address {address:?}") }
                })?;
            out.push(Some((host, port)));
        }
        out.sort();
        Ok(out)
    }

    /// Runs `cmd` on one master (`None`: the standalone server).
    async fn on_master<T: redis::FromRedisValue>(
        &self,
        conn: &Conn,
        master: Option<&(String, u16)>,
        cmd: redis::Cmd,
    ) -> Result<T> {
        let reply = match (conn, master) {
            (Conn::Cluster(cluster), Some((host, port))) => {
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port });
                let mut cluster = cluster.clone();
                tokio::time::timeout(self.deadline, async move { cluster.route_command(cmd, routing).await }).await
            }
            _ => {
                let mut conn = conn.clone();
                tokio::time::timeout(self.deadline, async move { cmd.query_async::<Value>(&mut conn).await }).await
            }
        };
        let reply =
            reply.map_err(|_| self.connections.timeout(self.deadline))?.map_err(|e| evalsha::redis_failure(&e))?;
        redis::from_redis_value(reply).map_err(parse_failure)
    }

    /// The fleet's allowed and refused checks of (`kind`, `name`) per minute, for the last
    /// [`HISTORY_MINUTES`] minutes (the current one last), by the server's clock.
    pub(crate) async fn history(&self, kind: Kind, name: &str) -> Result<Vec<MinuteCounts>> {
        let mut eval = redis::cmd("EVAL");
        eval.arg(HISTORY_SCRIPT).arg(1).arg(self.history_key(kind, name));
        let mut pipe = redis::pipe();
        pipe.add_command(eval);
        let ((now, fields),): ((String, HashMap<String, String>),) = self.query(&pipe).await?;
        let now_minute = now.parse::<u64>().unwrap_or(0) / 60_000_000;
        Ok(minutes(now_minute, &fields))
    }

    /// The hash of per-minute counts the metrics flush writes (see `metrics.lua`).
    pub(crate) fn history_key(&self, kind: Kind, name: &str) -> String {
        KeyBuilder::new(&self.prefix, kind, name, "").key("history")
    }
}

/// The last [`HISTORY_MINUTES`] minutes up to `now_minute` from a history hash: a ring of
/// slots `m<i>` (the minute the slot holds), `a<i>` (allowed), `r<i>` (refused).
fn minutes(now_minute: u64, fields: &HashMap<String, String>) -> Vec<MinuteCounts> {
    let get = |prefix: char, slot: u64| {
        fields.get(&format!("{prefix}{slot}")).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    };
    let first = now_minute.saturating_sub(HISTORY_MINUTES - 1);
    (first..=now_minute)
        .map(|minute| {
            let slot = minute % HISTORY_SLOTS;
            let held = fields.get(&format!("m{slot}")).and_then(|v| v.parse::<u64>().ok()) == Some(minute);
            MinuteCounts {
                start: UNIX_EPOCH + Duration::from_secs(minute * 60),
                allowed: if held { get('a', slot) } else { 0 },
                refused: if held { get('r', slot) } else { 0 },
            }
        })
        .collect()
}

/// Slots in the history ring: more than [`HISTORY_MINUTES`], so the minute being written never
/// overwrites one still shown.
pub(crate) const HISTORY_SLOTS: u64 = HISTORY_MINUTES + 2;

#[cold]
fn parse_failure(e: redis::ParsingError) -> Error {
    Error::BackendUnavailable { message: format!("Redis: unexpected reply: {e}") }
}

#[cold]
fn malformed_reply(what: &str, reply: &[String]) -> Error {
    Error::BackendUnavailable { message: format!("Redis: unexpected {what} reply {reply:?}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_only_the_minutes_its_slots_still_hold() {
        let now = 30_000_000;
        let mut fields = HashMap::new();
        let mut put = |minute: u64, a: u64, r: u64| {
            let slot = minute % HISTORY_SLOTS;
            fields.insert(format!("m{slot}"), minute.to_string());
            fields.insert(format!("a{slot}"), a.to_string());
            fields.insert(format!("r{slot}"), r.to_string());
        };
        put(now, 5, 1);
        put(now - 59, 7, 0);
        // A slot of a minute shown (now - 10) still holding a minute a full ring older.
        put(now - 10 - HISTORY_SLOTS, 100, 100);
        let out = minutes(now, &fields);
        assert_eq!(out.len(), HISTORY_MINUTES as usize);
        assert_eq!((out[59].allowed, out[59].refused), (5, 1));
        assert_eq!((out[0].allowed, out[0].refused), (7, 0));
        assert_eq!(out.iter().map(|m| m.allowed).sum::<u64>(), 12);
        assert_eq!(out[59].start, UNIX_EPOCH + Duration::from_secs(now * 60));
    }
}
