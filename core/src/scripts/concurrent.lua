-- The concurrent limiter's leases. Mirrors core/src/limiter/concurrent.rs.
-- KEYS[1]  a ZSET of holders: member = lease id (hex), score = instant its lease_timeout ends
-- KEYS[2]  the last fencing token granted (string)
-- KEYS[3]  a LIST a release pushes to, so that exactly one blocked waiter (BLPOP) wakes
-- ARGV[1]  'check' | 'peek' | 'release' | 'extend'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  limit
-- ARGV[4]  lock_timeout (µs)
-- ARGV[5]  lease id (check, release, extend)
-- check/peek return {allowed, limit, remaining, retry_after_us, reset_after_us, now_us,
-- fencing_token, reclaimed}; release and extend return {1, now_us, overdue} if the lease was
-- held (overdue = 1 when its lock_timeout, as last extended, had passed), {0, now_us} if lost.

local function now_us()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local holders, token_key, wake_key = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]
local now = now_us()
local limit = tonumber(ARGV[3])
local lock = tonumber(ARGV[4])
local fmt = function(x) return string.format('%d', x) end
-- Idle state expires with its last lease; the fencing token stays monotonic after that because
-- a token is never lower than `now`.
local function touch(key, until_us)
  -- One second of slack: see gcra.lua.
  if until_us > now then redis.call('PEXPIRE', key, fmt(math.ceil((until_us - now) / 1000) + 1000)) end
end
local function latest_expiry()
  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
  return last[2] and tonumber(last[2]) or 0
end

if op == 'extend' then
  -- Renew for another lock_timeout from now, only if still held (not reclaimed).
  local expiry = redis.call('ZSCORE', holders, ARGV[5])
  if expiry then
    redis.call('ZADD', holders, 'XX', fmt(now + lock), ARGV[5])
    touch(holders, latest_expiry())
    touch(token_key, latest_expiry())
    return {1, now, tonumber(expiry) <= now and 1 or 0}
  end
  return {0, now}
end

if op == 'release' then
  local expiry = redis.call('ZSCORE', holders, ARGV[5])
  if expiry then
    redis.call('ZREM', holders, ARGV[5])
    redis.call('LPUSH', wake_key, '1')
    redis.call('LTRIM', wake_key, 0, limit - 1)
    touch(wake_key, now + lock)
    return {1, now, tonumber(expiry) <= now and 1 or 0}
  end
  return {0, now}
end

local held = redis.call('ZCARD', holders)
local live = redis.call('ZCOUNT', holders, '(' .. fmt(now), '+inf')
local reclaimed = 0
if op == 'check' and held >= limit and live < limit then
  -- Full only because of overdue holders: reclaim them.
  reclaimed = redis.call('ZREMRANGEBYSCORE', holders, '-inf', fmt(now))
end
local allowed = live < limit
local function reset_after() return math.max(latest_expiry() - now, 0) end
if not allowed or op ~= 'check' then
  local retry = 0
  if not allowed then
    retry = tonumber(redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')[2]) - now
  end
  return {allowed and 1 or 0, limit, limit - math.min(live, limit), retry, reset_after(), now, 0, reclaimed}
end
local token = math.max(tonumber(redis.call('GET', token_key) or '0') + 1, now)
local expires = now + lock
redis.call('ZADD', holders, fmt(expires), ARGV[5])
redis.call('SET', token_key, fmt(token))
touch(holders, latest_expiry())
touch(token_key, latest_expiry())
return {1, limit, limit - live - 1, 0, reset_after(), now, token, reclaimed}
