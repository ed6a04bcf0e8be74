-- The hold check every engine's script starts with (see engine/hold.rs): pauses and blocks. A
-- check or peek passes two keys more than its engine's own, last in KEYS: the pause key, then
-- the block key, of the same identity (same hash tag, so the same Cluster slot). They are taken
-- off KEYS before the engine's body runs, so engines index their keys exactly as their `.lua`
-- files document. While the block key holds an instant (µs) after now and no pause ends later,
-- the call is answered `{-2, remaining µs, now}`; while the pause key does, `{-1, remaining
-- µs, now}` (no engine's reply starts with a negative number); the engine's body does not run:
-- a held refusal reads and writes nothing else. `now` (ARGV[2], or the server's TIME) is read
-- only when a hold exists.
--
-- The keys are read one of two ways (the section below that engine/lua.rs puts in place of
-- `--@READ@`), both on every check and peek, so that a hold set by any process is seen by the
-- next call of every other, with no poll:
-- - READ: one EXISTS of the two keys (an integer reply costs the server less than MGET's two
--   nils); the MGET runs only when one exists;
-- - READ_WITH_STATE, for an engine whose state is KEYS[1]'s string (the token bucket's,
--   bucket_state.lua): one MGET of the two keys and the state, which the body then takes from
--   `tat_raw` instead of a GET of its own (one `redis.call` fewer on every check of a bucket in
--   use; a new key's is still read by GET, which tells absent from another type).
--@CHECK
local tat_raw
if ARGV[1] == 'check' or ARGV[1] == 'peek' then
  local block_key = table.remove(KEYS)
  local pause_key = table.remove(KEYS)
  --@READ@
  if held then
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
--@READ
-- held: the pause and block keys' values when either exists, else false.
local held = redis.call('EXISTS', pause_key, block_key) > 0 and redis.call('MGET', pause_key, block_key)
--@READ_WITH_STATE
-- held: as READ's; tat_raw: KEYS[1]'s value (false when absent), read with them.
local held = redis.call('MGET', pause_key, block_key, KEYS[1])
tat_raw = held[3]
if not (held[1] or held[2]) then held = false end
