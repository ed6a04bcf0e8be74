-- The concurrent limiter's leases. Mirrors core/src/engine/concurrent.rs.
-- KEYS[1]  a ZSET of holders: member = lease id (hex), score = instant its lease_timeout ends
-- KEYS[2]  the last fencing token granted (string)
-- KEYS[3]  a LIST a release pushes to, so that exactly one blocked waiter (BLPOP) wakes
-- KEYS[4]  a ZSET of abandoned lease ids: member = lease id, score = instant it may be forgotten
-- KEYS[5]  a HASH of grants: lease id -> 'fencing_token granted_at_us' (for operators' views)
-- KEYS[6]  a ZSET of waiters: member = waiter id, score = instant its wait ends
-- ARGV[1]  'check' | 'peek' | 'release' | 'extend' | 'abandon'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  limit
-- ARGV[4]  lock_timeout (µs)
-- ARGV[5]  lease id (check, release, extend, abandon)
-- ARGV[6]  check: the waiter id of an acquire about to wait, or ''
-- ARGV[7]  check: how long that waiter waits (µs)
-- ARGV[8]  a dry check (see wrapper.lua): the slots the combination asks of this limiter and key,
--          up to this part (1 when it is the only one); a dry check writes nothing
-- check/peek return {allowed, limit, remaining, retry_after_us, reset_after_us, now_us,
-- fencing_token, reclaimed}; release, extend and abandon return {1, now_us, overdue} if the
-- lease was held (overdue = 1 when its lock_timeout, as last extended, had passed), {0, now_us}
-- if not.
--
-- 'abandon' is sent by a client whose check call gave up without handing the lease to its
-- caller (a timeout, a lost reply, a cancelled call): it frees the lease if the check granted
-- it, and otherwise remembers the id for lock_timeout, so that the check, should it still
-- arrive (held in a hung server or a slow network), grants nothing. Lease ids are unique: this
-- never frees another caller's slot.

local holders, token_key, wake_key, abandoned = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local grants, waiters = KEYS[5], KEYS[6]
local op = ARGV[1]
local now = now_us(ARGV)
local limit = tonumber(ARGV[3])
local lock = tonumber(ARGV[4])
local fmt = function(x) return string.format('%d', x) end
-- Idle state expires with its last lease; the fencing token stays monotonic after that because
-- a token is never lower than `now`.
local function touch(key, until_us)
  -- One second of slack: see gcra.lua.
  if until_us > now then redis.call('PEXPIRE', key, fmt(math.ceil((until_us - now) / 1000) + 1000 + CLOCK_SLACK_MS)) end
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
    local last = latest_expiry()
    touch(holders, last)
    touch(token_key, last)
    touch(grants, last)
    return {1, now, tonumber(expiry) <= now and 1 or 0}
  end
  return {0, now}
end

if op == 'release' or op == 'abandon' then
  local expiry = redis.call('ZSCORE', holders, ARGV[5])
  if expiry then
    redis.call('ZREM', holders, ARGV[5])
    redis.call('HDEL', grants, ARGV[5])
    redis.call('LPUSH', wake_key, '1')
    redis.call('LTRIM', wake_key, 0, limit - 1)
    touch(wake_key, now + lock)
    return {1, now, tonumber(expiry) <= now and 1 or 0}
  end
  if op == 'abandon' then
    redis.call('ZREMRANGEBYSCORE', abandoned, '-inf', fmt(now))
    redis.call('ZADD', abandoned, fmt(now + lock), ARGV[5])
    touch(abandoned, now + lock)
  end
  return {0, now}
end

local abandoned_id
if op == 'check' and dry then
  abandoned_id = redis.call('ZSCORE', abandoned, ARGV[5])
elseif op == 'check' then
  abandoned_id = redis.call('ZREM', abandoned, ARGV[5]) == 1
end
if abandoned_id then
  -- Its caller gave up and abandoned this lease before the check got here: grant nothing.
  refused = true
  return {0, limit, 0, 0, 0, now, 0, 0}
end

local held = redis.call('ZCARD', holders)
local live = redis.call('ZCOUNT', holders, '(' .. fmt(now), '+inf')
local reclaimed = 0
if op == 'check' and not dry and held >= limit and live < limit then
  -- Full only because of overdue holders: reclaim them.
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', holders, '-inf', fmt(now))) do
    redis.call('HDEL', grants, id)
  end
  reclaimed = redis.call('ZREMRANGEBYSCORE', holders, '-inf', fmt(now))
end
-- An acquire about to wait is counted among the waiters while refused, and no more once granted.
local waiter = (op == 'check' and not dry) and ARGV[6] or ''
if waiter ~= '' then
  local wait = tonumber(ARGV[7])
  if live < limit or wait <= 0 then
    redis.call('ZREM', waiters, waiter)
  else
    redis.call('ZREMRANGEBYSCORE', waiters, '-inf', fmt(now))
    redis.call('ZADD', waiters, fmt(now + wait), waiter)
    local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
    touch(waiters, tonumber(last[2]))
  end
end
-- A dry check of a combination asks for its slots and every earlier part's on this key.
local slots = dry and op == 'check' and tonumber(ARGV[8]) or 1
local allowed = live + slots - 1 < limit
local function reset_after() return math.max(latest_expiry() - now, 0) end
if not allowed or op ~= 'check' then
  refused = op == 'check' and not allowed
  local retry = 0
  if not allowed then
    -- When enough live holders have left: overdue holders still stored (full with live ones,
    -- nothing was reclaimed) have expired already and do not count. (More slots than the limit
    -- never fit: a lock_timeout is as long as any wait may need.)
    local freeing = redis.call('ZRANGEBYSCORE', holders, '(' .. fmt(now), '+inf', 'WITHSCORES', 'LIMIT', live + slots - 1 - limit, 1)
    retry = freeing[2] and tonumber(freeing[2]) - now or lock
  end
  return {allowed and 1 or 0, limit, limit - math.min(live, limit), retry, reset_after(), now, 0, reclaimed}
end
if dry then return {1, limit, limit - live - slots, 0, reset_after(), now, 0, reclaimed} end
local token = math.max(tonumber(redis.call('GET', token_key) or '0') + 1, now)
local expires = now + lock
redis.call('ZADD', holders, fmt(expires), ARGV[5])
redis.call('SET', token_key, fmt(token))
redis.call('HSET', grants, ARGV[5], fmt(token) .. ' ' .. fmt(now))
local last = latest_expiry()
touch(holders, last)
touch(token_key, last)
touch(grants, last)
return {1, limit, limit - live - 1, 0, math.max(last - now, 0), now, token, reclaimed}
