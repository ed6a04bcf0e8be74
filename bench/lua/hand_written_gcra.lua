-- The cheapest GCRA a user could write (bench/python/peer_server_time.py's token-bucket peer):
-- one GET, one SET with an expiry, the server's TIME. KEYS[1] holds the theoretical arrival
-- time (µs); ARGV[1] the emission interval T (µs per token), ARGV[2] the burst tolerance tau
-- (capacity × T). Returns 1 (admitted) or 0 (refused).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local T, tau = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
if tat - now > tau - T then return 0 end
redis.call('SET', KEYS[1], string.format('%d', tat + T), 'PX', math.ceil((tat + T - now) / 1000))
return 1
