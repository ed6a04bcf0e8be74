//! The combined script of `check_all`: several engines' calls decided in one atomic step, all
//! admitted or none consumed.
//!
//! Every counting engine's `.lua` body becomes a function of its own (with the hold check,
//! pauses and blocks, in front, as in the single-call wrapper of [`super::script`]). The script reads "now" once and
//! hands the same instant to every part, then runs the parts in order. Before a part runs it
//! snapshots the part's keys (`DUMP` and `PTTL`); when any part refused (its body set
//! `refused`), every part's keys are restored from those snapshots, newest first, so the
//! combination consumed nothing — not even the housekeeping a refused part did. Every part's
//! reply is returned, so each engine's `decode` reads its own.
//!
//! Calling convention: `EVALSHA sha <all keys> keys… now n (engine key_count arg_count)… args…`
//! where `now` is the caller's instant (a manual clock) or `''` (the server's TIME), `engine`
//! is a 1-based index into [`ENGINES`], and each part's keys and arguments are exactly those of
//! its single call (its own instant, ARGV[2], is replaced by the shared one: the caller's, or
//! `''`, so that every part reads the server's TIME through `now_us`, which reads it once per
//! invocation and keeps the server clock's TTLs; a part handed the server's instant as a
//! string would take it for a caller's clock and keep its state an hour longer). The hold keys
//! (pause, block) are last among a part's keys and only read, so they are not snapshotted.
//!
//! Reply: `{allowed (1|0), n, len_1, reply_1…, len_2, reply_2…}`, flat so that it reads as one
//! array of integers; an engine's error reply (after restoring) is the whole reply.

use std::sync::LazyLock;

use super::script::{LuaScript, HOLD_PRELUDE, NOW_US, SETTLE_CHARGE};

/// The engines that can take part, by the name of their script, in the order of their index
/// in the combined script (1-based). The leased token bucket spends in process and leased
/// partitions pace in process: neither has a one-script step to combine.
pub(crate) const ENGINES: &[(&str, &str)] = &[
    ("gcra", include_str!("gcra.lua")),
    ("sliding", include_str!("sliding.lua")),
    ("log", include_str!("log.lua")),
    ("concurrent", include_str!("concurrent.lua")),
    ("calendar", include_str!("calendar.lua")),
];

/// The index (1-based) in the combined script of the engine whose script is named `name`.
pub(crate) fn engine_index(name: &str) -> Option<usize> {
    ENGINES.iter().position(|(n, _)| *n == name).map(|i| i + 1)
}

/// What runs the parts, after the engines' functions.
const RUNNER: &str = r#"
local n = tonumber(ARGV[2])
local now = ARGV[1]
local saved, replies = {}, {}
local function restore(upto)
  for i = upto, 1, -1 do
    local snap = saved[i]
    for j = #snap, 1, -1 do
      local s = snap[j]
      if s[2] then
        local ttl = 0
        if s[3] >= 0 then ttl = math.max(s[3], 1) end
        redis.call('RESTORE', s[1], ttl, s[2], 'REPLACE')
      else
        redis.call('DEL', s[1])
      end
    end
  end
end
local k, a = 1, 3 + 3 * n
local any_refused = false
for i = 1, n do
  local engine = engines[tonumber(ARGV[3 * i])]
  local key_count, arg_count = tonumber(ARGV[3 * i + 1]), tonumber(ARGV[3 * i + 2])
  local keys, args = {}, {}
  for j = 1, key_count do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, arg_count do args[j] = ARGV[a]; a = a + 1 end
  args[2] = now
  local snap = {}
  for j = 1, key_count - 2 do
    snap[j] = {keys[j], redis.call('DUMP', keys[j]), redis.call('PTTL', keys[j])}
  end
  saved[i] = snap
  refused = false
  local ok, reply = pcall(engine, keys, args)
  if not ok then
    restore(i)
    if type(reply) == 'table' and reply.err then return reply end
    return redis.error_reply(tostring(reply))
  end
  if type(reply) == 'table' and reply.err then
    restore(i)
    return reply
  end
  replies[i] = reply
  if refused then any_refused = true end
end
if any_refused then restore(n) end
local out = {any_refused and 0 or 1, n}
for i = 1, n do
  out[#out + 1] = #replies[i]
  for _, v in ipairs(replies[i]) do out[#out + 1] = v end
end
return out
"#;

/// The combined script (see the module documentation).
pub(crate) static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| {
    let mut body = String::from(NOW_US);
    body.push_str(SETTLE_CHARGE);
    body.push_str("local refused = false\nlocal engines = {}\n");
    for (i, (_, engine)) in ENGINES.iter().enumerate() {
        body.push_str(&format!("engines[{}] = function(KEYS, ARGV)\n", i + 1));
        body.push_str(HOLD_PRELUDE);
        body.push_str(engine);
        body.push_str("\nend\n");
    }
    body.push_str(RUNNER);
    LuaScript::whole("check_all", body)
});

/// A combined reply: whether every part was admitted, and each part's own reply.
pub(crate) fn split(reply: &[i64]) -> Option<(bool, Vec<&[i64]>)> {
    let (&allowed, after) = reply.split_first()?;
    let (&n, mut rest) = after.split_first()?;
    let mut parts = Vec::with_capacity(usize::try_from(n).ok()?);
    for _ in 0..n {
        let (&len, tail) = rest.split_first()?;
        let len = usize::try_from(len).ok()?;
        if tail.len() < len {
            return None;
        }
        parts.push(&tail[..len]);
        rest = &tail[len..];
    }
    rest.is_empty().then_some((allowed == 1, parts))
}
