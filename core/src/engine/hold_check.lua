-- The hold check every engine's script starts with (see engine/hold.rs): pauses and blocks. A
-- check or peek passes two keys more than its engine's own, last in KEYS: the pause key, then
-- the block key, of the same identity (same hash tag, so the same Cluster slot). They are taken
-- off KEYS before the engine's body runs, so engines index their keys exactly as their `.lua`
-- files document. While the block key holds an instant (µs) after now and no pause ends later,
-- the call is answered `{-2, remaining µs, now}`; while the pause key does, `{-1, remaining
-- µs, now}` (no engine's reply starts with a negative number); the engine's body does not run:
-- a held refusal reads and writes nothing else. Unheld, the cost is one EXISTS of two missing
-- keys (an integer reply costs the server less than MGET's two nils; the MGET runs only when
-- one exists); `now` (ARGV[2], or the server's TIME) is read only when a hold exists.
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
