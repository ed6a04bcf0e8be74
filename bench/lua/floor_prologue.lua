-- The contract's floor (bench/python/peer_server_time.py): what a peer's script must add to give
-- ratekeeper's guarantees, put before the peer's own script. The server's TIME (client clocks
-- never matter), then the hold check: the pause key and the block key, passed last in KEYS with
-- the hash tag of the peer's first key; while either holds an instant (µs) after now, the call is
-- refused and the peer's script does not run. Unheld, the cost is one EXISTS of two missing keys.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local n = #KEYS
if redis.call('EXISTS', KEYS[n - 1], KEYS[n]) > 0 then
  local held = redis.call('MGET', KEYS[n - 1], KEYS[n])
  local paused_until, blocked_until = tonumber(held[1]) or 0, tonumber(held[2]) or 0
  if blocked_until > now and blocked_until >= paused_until then return {-2, blocked_until - now} end
  if paused_until > now then return {-1, paused_until - now} end
end
