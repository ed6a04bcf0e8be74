-- Registers the limiters a process uses (each at most once a minute): kind, spec, who uses it,
-- which processes, first and last seen; all of it expires a TTL after its last registration.
--
-- KEYS[1] the sorted set of names (score: last seen, ms); KEYS[2..] each limiter's registry hash.
-- ARGV: TTL (ms), user (language, version, host), process (host:pid), then (name, kind, spec)
-- for each hash in KEYS order.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local user, process = 'user:' .. ARGV[2], 'proc:' .. ARGV[3]
for i = 2, #KEYS do
  local at = 4 + (i - 2) * 3
  local hash = KEYS[i]
  redis.call('HSETNX', hash, 'first_seen', now)
  redis.call('HSET', hash, 'kind', ARGV[at + 1], 'spec', ARGV[at + 2], 'last_seen', now, user, now, process, now)
  -- Processes silent for three minutes (they renew every minute) and users silent for the TTL
  -- are forgotten, so the hash stays as small as the fleet.
  local fields = redis.call('HGETALL', hash)
  for j = 1, #fields, 2 do
    local field, seen = fields[j], tonumber(fields[j + 1])
    local prefix = string.sub(field, 1, 5)
    if (prefix == 'proc:' and seen < now - 180000) or (prefix == 'user:' and seen < now - ttl) then
      redis.call('HDEL', hash, field)
    end
  end
  redis.call('PEXPIRE', hash, ttl)
  redis.call('ZADD', KEYS[1], now, ARGV[at])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return now
