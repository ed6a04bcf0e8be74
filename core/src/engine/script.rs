//! The Lua scripts of the engines and the calling convention they share: each engine's `.lua`
//! file runs inside one wrapper that accepts a single call or a batch of calls.

use std::sync::LazyLock;

use redis::{Cmd, Script};

/// A Lua script: its text (an engine's `.lua` file inside [`BATCH_WRAPPER`]), and the SHA1 that
/// EVALSHA names it by.
pub(crate) struct LuaScript {
    /// A short name (the engine's), for tools.
    pub name: &'static str,
    /// The text loaded into Redis.
    pub body: String,
    /// What EVALSHA names it by.
    pub sha1: String,
}

/// Every engine's script runs inside this wrapper, which makes it callable two ways:
/// - one call: `EVALSHA sha <n> keys… args…`, exactly as the `.lua` file documents;
/// - a batch of calls (see the Redis backend's `scripts::batch`): `EVALSHA sha <all keys> keys… 'batch' <n> (<keys_i>
///   <args_i>)… args…`, or `… 'batch-same' <n> <keys> <args> args…` when every call has the
///   same number of keys and of arguments (one shape written once costs the server less), or
///   `… 'batch-shared' <n> <keys> <args> args` when every call also has the same arguments
///   (the usual case: checks of one limiter at one cost, told apart by their keys), written
///   once for all; answered with one reply per call. The calls run one after the other,
///   each exactly as if alone, and each call's error is its own: the others are still answered.
///   They arrived together, so they share one instant: the server's TIME is read once per
///   invocation (see [`NOW_US`]).
///
/// A batch costs the server one script invocation, one command parse and one reply write
/// instead of one per call; what that saves is measured in the README (Benchmarks: "Figures
/// behind design choices").
///
/// Every call also passes through the hold check ([`HOLD_PRELUDE`]: pauses and blocks), written once here for
/// every engine, and every script reads "now" through the one helper [`NOW_US`]; a settle's
/// charge is the one helper [`SETTLE_CHARGE`].
///
/// An engine's body that refuses a check sets `refused` (declared here, so that bodies can set
/// it), and so does the hold check: the combined script of `check_all`
/// ([`super::script_all`]) reads it to know which part refused without decoding every engine's
/// reply; a single call ignores it. That script also sets `dry` while it decides its parts: an
/// engine's body then decides a check, and answers it as usual, without recording it (it may
/// still drop state that no longer counts, as a peek does); a single call never sets it.
const BATCH_WRAPPER: &str = r#"
__NOW__
__SETTLE_CHARGE__
local refused, dry = false, false
local function run(KEYS, ARGV)
__HOLD__
__BODY__
end
__SETTLE__
local shared = ARGV[1] == 'batch-shared'
local same = shared or ARGV[1] == 'batch-same'
if ARGV[1] == 'settle' then return settle(KEYS, ARGV) end
if ARGV[1] ~= 'batch' and not same then return run(KEYS, ARGV) end
local n = tonumber(ARGV[2])
local replies = {}
local key_count, arg_count = tonumber(ARGV[3]), tonumber(ARGV[4])
local k, a = 1, same and 5 or 2 * n + 3
for i = 1, n do
  if not same then key_count, arg_count = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i]) end
  local keys, args = {}, {}
  for j = 1, key_count do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, arg_count do args[j] = ARGV[a]; a = a + 1 end
  if shared then a = 5 end
  local ok, reply = pcall(args[1] == 'settle' and settle or run, keys, args)
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' and reply.err then
    replies[i] = reply
  else
    replies[i] = redis.error_reply(tostring(reply))
  end
end
return replies
"#;

/// The one way a script reads "now" (µs): the caller's instant in ARGV[2] (a manual clock), or
/// else the Redis server's TIME, so that client clocks never matter. Every engine's `.lua`
/// calls `now_us(ARGV)`.
///
/// The server's TIME is read once per invocation (`server_now`): every call of a batch, and a
/// settle and the peek or body it runs, decide at the instant the invocation began, as calls
/// that arrive together on a manual clock do. A `redis.call` is a large share of a short
/// check's server time, and every engine already decides calls of equal instants exactly
/// (a manual clock sends them): a log or a lease table keys its entries by count or id, never
/// by instant alone.
///
/// It also sets `CLOCK_SLACK_MS`, real time every TTL a script sets gets beyond its state's
/// lifetime by the clock it decides with: none on the server's own clock (its TTLs keep their
/// own second of slack); an hour on a caller's clock, whose time need not pass with real time,
/// so that a stall between two calls (a loaded machine, a paused process, a debugger) never
/// expires state that clock still holds live. And it binds `unpack` in every Lua the servers
/// embed (5.1's global, 5.4's `table.unpack`).
pub(super) const NOW_US: &str = r#"
-- Lua 5.1 (Redis, Valkey, KeyDB) has `unpack`; Lua 5.4 (Dragonfly) only `table.unpack`. Read
-- through `table` first: Redis refuses a script that reads a global it does not define.
local unpack = table.unpack or unpack
local CLOCK_SLACK_MS = 0
local server_now
local function now_us(ARGV)
  if ARGV[2] ~= '' then
    CLOCK_SLACK_MS = 3600000
    return tonumber(ARGV[2])
  end
  CLOCK_SLACK_MS = 0
  if not server_now then
    local t = redis.call('TIME')
    server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server_now
end
"#;

/// The charge of a settle above its estimate, as debt up to `max_ahead`: one Lua function,
/// `settle_charge`, that the engines keeping a bucket's use in ticks call. It is part of the
/// prelude of every script (and of `check_all`'s), outside the per-call body, so it is defined
/// once per invocation, not once per call of a batch.
pub(super) const SETTLE_CHARGE: &str = include_str!("settle_charge.lua");

/// The hold check every engine's script starts with: pauses (see `Limiter::pause`) and blocks
/// (see `Limiter::block`). A check or peek passes two keys more than its engine's own, last in
/// KEYS: the pause key, then the block key, of the same identity (same hash tag, so the same
/// Cluster slot). They are taken off KEYS before the engine's body runs, so engines index their
/// keys exactly as their `.lua` files document. While the block key
/// holds an instant (µs) after now and no pause ends later, the call is answered
/// `{-2, remaining µs, now}`; while the pause key does, `{-1, remaining µs, now}` (no engine's
/// reply starts with a negative number); the engine's body does not run: a held refusal reads
/// and writes nothing else. Unheld, the cost is one EXISTS of two missing keys (an integer
/// reply costs the server less than MGET's two nils; the MGET runs only when one exists); `now`
/// (ARGV[2], or the server's TIME) is read only when a hold exists.
pub(super) const HOLD_PRELUDE: &str = r#"
if ARGV[1] == 'check' or ARGV[1] == 'peek' then
  local block_key = table.remove(KEYS)
  local pause_key = table.remove(KEYS)
  if redis.call('EXISTS', pause_key, block_key) > 0 then
    local held = redis.call('MGET', pause_key, block_key)
    local now = now_us(ARGV)
    local paused_until, blocked_until = tonumber(held[1]) or 0, tonumber(held[2]) or 0
    if blocked_until > now and blocked_until >= paused_until then
      refused = true
      return {-2, blocked_until - now, now}
    end
    if paused_until > now then
      refused = true
      return {-1, paused_until - now, now}
    end
  end
end
"#;

/// Settles apply once per id, written once here for every engine (see `Limiter::settle`). A
/// settle passes three keys more than its engine's own, last in KEYS: the pause and block keys
/// (as a check does) and the identity's record of applied settles (a sorted set: settle id →
/// the end of its settle window, µs), and as ARGV[3] and ARGV[4] its id and the end of its
/// window (`SETTLE_WINDOW` after its call was charged); they are taken off before the engine's
/// body runs. A settle at or past the end of its window is answered `{2}` (refused: its id is
/// no longer remembered, so a repeat could not be told apart). An id already recorded makes
/// the call a peek (the hold check applies to it), answered `{0, peek reply…}`; otherwise the
/// body settles, the id is recorded until the end of its window, whatever the state's TTL (a
/// repeat after the state rolled over must not apply again), and the answer is
/// `{1, settle reply…}`. The record holds at most the ids of the last window's settles.
const SETTLE: &str = r#"
local function settle(KEYS, ARGV)
  local record = table.remove(KEYS)
  local id = table.remove(ARGV, 3)
  local ends = tonumber(table.remove(ARGV, 3))
  local now = now_us(ARGV)
  redis.call('ZREMRANGEBYSCORE', record, '-inf', string.format('%d', now))
  local reply
  if redis.call('ZSCORE', record, id) then
    ARGV[1] = 'peek'
    reply = run(KEYS, ARGV)
    if type(reply) == 'table' and not reply.err then table.insert(reply, 1, 0) end
    return reply
  end
  if now >= ends then return {2} end
  table.remove(KEYS)
  table.remove(KEYS)
  reply = run(KEYS, ARGV)
  if type(reply) ~= 'table' or reply.err then return reply end
  redis.call('ZADD', record, string.format('%d', ends), id)
  local last = redis.call('ZRANGE', record, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', record, string.format('%d', math.ceil((tonumber(last[2]) - now) / 1000) + 1 + CLOCK_SLACK_MS))
  table.insert(reply, 1, 1)
  return reply
end
"#;

impl LuaScript {
    /// The script `name` whose body is `engine` (an engine's `.lua` file).
    pub(crate) fn new(name: &'static str, engine: &'static str) -> Self {
        let body = BATCH_WRAPPER
            .replacen("__NOW__", NOW_US, 1)
            .replacen("__SETTLE_CHARGE__", SETTLE_CHARGE, 1)
            .replacen("__HOLD__", HOLD_PRELUDE, 1)
            .replacen("__BODY__", engine, 1)
            .replacen("__SETTLE__", SETTLE, 1);
        let sha1 = Script::new(&body).get_hash().to_owned();
        LuaScript { name, body, sha1 }
    }
}

impl LuaScript {
    /// The script `name` whose whole text is `body` (no wrapper): the combined script.
    pub(crate) fn whole(name: &'static str, body: String) -> Self {
        let sha1 = Script::new(&body).get_hash().to_owned();
        LuaScript { name, body, sha1 }
    }

    /// `EVALSHA <sha1> <keys>`, sized for a short call: append the `keys` keys, then ARGV, with
    /// [`Cmd::arg`] (numbers are written in decimal without an intermediate `String`).
    pub(crate) fn evalsha(&self, keys: usize) -> Cmd {
        let mut cmd = Cmd::with_capacity(16, 160);
        cmd.arg("EVALSHA").arg(self.sha1.as_bytes()).arg(keys);
        cmd
    }

    /// The EVAL equivalent of `evalsha` (same keys and arguments), for a server that does not
    /// have the script cached.
    pub(crate) fn eval_of(&self, evalsha: &Cmd) -> Cmd {
        let mut cmd = Cmd::with_capacity(16, self.body.len() + 160);
        cmd.arg("EVAL").arg(self.body.as_bytes());
        for arg in evalsha.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

/// Generates `all`: the pause and block scripts, then every engine's scripts in the order of the table in
/// `kinds.rs`.
macro_rules! script_list {
    ($($variant:ident: $engine:ty, $storage:ident;)*) => {
        /// Every script, for tools and benchmarks.
        fn all() -> impl Iterator<Item = &'static LazyLock<LuaScript>> {
            let engines = [$(<$engine as super::Engine>::SCRIPTS,)*];
            [&super::pause::SCRIPT, &super::block::SCRIPT].into_iter().chain(engines.into_iter().flatten().copied())
        }
    };
}
super::kinds::for_each_engine!(script_list);

/// Computes every script (its text and SHA1) now, on the calling thread. A Redis backend calls
/// it when it is built, so that no call computes one lazily: a process forked while another of
/// its threads was computing a script would wait for that computation forever in the child,
/// where the thread does not exist.
pub(crate) fn prepare_all() {
    for script in all() {
        LazyLock::force(script);
    }
    LazyLock::force(&super::script_all::SCRIPT);
}

/// Every script as (name, text as loaded into Redis), for tools and benchmarks.
pub fn sources() -> Vec<(&'static str, &'static str)> {
    let combined: &'static LuaScript = &super::script_all::SCRIPT;
    all().map(|s| (s.name, s.body.as_str())).chain(std::iter::once((combined.name, combined.body.as_str()))).collect()
}
