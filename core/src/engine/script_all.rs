//! The combined script of `check_all`: several engines' calls decided in one atomic step, all
//! admitted or none consumed.
//!
//! Every counting engine's `.lua` body becomes a function of its own (with the hold check,
//! pauses and blocks, in front, as in the single-call wrapper of [`super::lua`]). The script
//! reads "now" once and hands the same instant to every part. It decides first and writes
//! after: it runs every part `dry` (each engine decides its check and answers it without
//! recording it), and only when every part admits does it run them again for real, in order.
//! A refused combination therefore writes nothing a refusal would not (an engine may drop state
//! that no longer counts, as a peek does), needs no snapshot of any key (no `DUMP`, no
//! `RESTORE`, which the common `+@all -@dangerous` ACL forbids), and costs the same whatever
//! the size of the parts' state.
//!
//! Parts on the same state (one limiter twice on one key) must see each other: a dry part is
//! decided at the cost of every earlier part on its state plus its own (`decide`), so that the
//! parts then admit one after the other as they were decided. (Parts of one name and kind with
//! different specs could not be decided so: `check_all` refuses them before anything is sent.)
//!
//! Calling convention: `EVALSHA sha <all keys> keys… now n (engine key_count arg_count
//! decide)… args…` where `now` is the caller's instant (a manual clock) or `''` (the server's
//! TIME), `engine` is a 1-based index into [`engines`], and each part's keys and arguments are
//! exactly those of its single call (its own instant, ARGV[2], is replaced by the shared one:
//! the caller's, or `''`, so that every part reads the server's TIME through `now_us`, which
//! reads it once per invocation and keeps the server clock's TTLs; a part handed the server's
//! instant as a string would take it for a caller's clock and keep its state an hour longer).
//! While deciding, the argument at the engine's cost position ([`super::Engine::COMBINED`]) is `decide`.
//!
//! Reply: `{allowed (1|0), n, len_1, reply_1…, len_2, reply_2…}`, flat so that it reads as one
//! array of integers: when allowed, each part's reply to its real run; when refused, each
//! part's reply to its dry run (decided at its `decide` cost). An engine's error reply is the
//! whole reply.

use std::sync::LazyLock;

use super::contract::Combined;
use super::lua::{expand, LuaScript, BUCKET_FUNCTIONS, HOLD_CHECK, PRELUDE};

/// The engines that can take part, in the order of their index in the combined script
/// (1-based): each engine that says how ([`super::Engine::COMBINED`]), in the order of the table
/// of engines (`kinds.rs`). The leased token bucket spends in process and leased partitions
/// pace in process: neither has a one-script step to combine.
pub(crate) fn engines() -> impl Iterator<Item = &'static Combined> {
    super::COMBINED.iter().flatten()
}

/// The index (1-based) in the combined script of the engine whose script is named `name`.
pub(crate) fn engine_index(name: &str) -> Option<usize> {
    engines().position(|engine| engine.name == name).map(|i| i + 1)
}

/// What runs the parts, after the engines' functions.
const RUNNER: &str = r#"
local n = tonumber(ARGV[2])
local now = ARGV[1]
local parts = {}
local k, a = 1, 3 + 4 * n
for i = 1, n do
  local at = 4 * i - 1
  local engine = tonumber(ARGV[at])
  local key_count, arg_count = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local keys, args = {}, {}
  for j = 1, key_count do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, arg_count do args[j] = ARGV[a]; a = a + 1 end
  args[2] = now
  parts[i] = {engines[engine], keys, args, costs[engine], ARGV[at + 3]}
end
-- Runs part `i` (dry: decided at its `decide` cost, nothing recorded); its reply, whether it
-- refused, or an error reply.
local function run_part(i)
  local p = parts[i]
  local keys, args = {unpack(p[2])}, {unpack(p[3])}
  if dry then args[p[4]] = p[5] end
  refused = false
  local ok, reply = pcall(p[1], keys, args)
  if not ok then
    if type(reply) == 'table' and reply.err then return reply end
    return redis.error_reply(tostring(reply))
  end
  return reply, refused
end
local replies, all = {}, 1
dry = true
for i = 1, n do
  local reply, no = run_part(i)
  if reply.err then return reply end
  replies[i] = reply
  if no then all = 0 end
end
dry = false
if all == 1 then
  for i = 1, n do
    local reply, no = run_part(i)
    if reply.err then return reply end
    if no then
      return redis.error_reply('ERR ratekeeper check_all: part ' .. i .. ' refused after every part was decided admitted')
    end
    replies[i] = reply
  end
end
local out = {all, n}
for i = 1, n do
  out[#out + 1] = #replies[i]
  for _, v in ipairs(replies[i]) do out[#out + 1] = v end
end
return out
"#;

/// The combined script (see the module documentation).
pub(crate) static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| {
    let mut body = [PRELUDE, BUCKET_FUNCTIONS].concat();
    body.push_str("local refused, dry = false, false\nlocal engines, costs = {}, {}\n");
    for (i, engine) in engines().enumerate() {
        body.push_str(&format!("costs[{}] = {}\n", i + 1, engine.cost_at));
        body.push_str(&format!("engines[{}] = function(KEYS, ARGV)\n", i + 1));
        body.push_str(HOLD_CHECK);
        body.push_str(&expand(engine.lua));
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
