-- Calendar quotas: `limit` per calendar period (day, ISO week, anchored month, year) in a time
-- zone. Mirrors core/src/engine/calendar.rs: this script picks the period containing the
-- server's instant among the ones the client computed, records an admitted call, and returns
-- what the rule reads; the caller replays the rule on it to build the decision.
-- KEYS[1]  a HASH: `e` the end (µs) of the period counted, `c` its count
-- ARGV[1]  'check' | 'peek' | 'settle'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  cost
-- ARGV[4]  limit
-- ARGV[5..8]  four consecutive period boundaries b0 < b1 < b2 < b3 (µs) computed by the client
--          around its own instant: the previous, current and next periods are [b0, b1),
--          [b1, b2) and [b2, b3), so a client clock that is off by less than a period (either
--          way) still names the server's period exactly.
-- ARGV[9]  settle: the actual cost (ARGV[3] is then the cost the call was charged)
-- ARGV[10] settle: the instant (µs) the call was charged at
-- A dry check (see wrapper.lua) records nothing.
-- Returns {now, end of the period containing now, count in it before this call}, or an error
-- when the server's instant is in none of the three periods.
-- Numbers are written with %d: tostring() would serialise large doubles as 1.7e+15.

local h = KEYS[1]
local now = now_us(ARGV)
local commit = ARGV[1] == 'check'
local cost, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local fmt = function(x) return string.format('%d', x) end

local starts, ends
for i = 5, 7 do
  if now >= tonumber(ARGV[i]) and now < tonumber(ARGV[i + 1]) then
    starts, ends = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  end
end
if not ends then
  return redis.error_reply('ERR ratekeeper calendar: the server clock is more than a period away from the client clock')
end

local got = redis.call('HMGET', h, 'e', 'c')
local count = 0
if tonumber(got[1]) == ends then count = tonumber(got[2]) end

if ARGV[1] == 'settle' then
  -- A charge goes to the current period, even past the limit; a refund only to the period the
  -- call was charged in, if it is still current, and never below zero.
  local actual, at = tonumber(ARGV[9]), tonumber(ARGV[10])
  local settled = count
  if actual >= cost then
    settled = count + (actual - cost)
  elseif at >= starts and at < ends then
    settled = math.max(count - (cost - actual), 0)
  end
  if settled ~= count then
    redis.call('HSET', h, 'e', fmt(ends), 'c', fmt(settled))
    redis.call('PEXPIRE', h, fmt(math.ceil((ends - now) / 1000) + 1000 + CLOCK_SLACK_MS))
  end
  return {now, ends, count}
end

-- Cost 0 is always admitted, even above the limit (a same-named limiter may be larger).
local asked = commit and cost or 1
local allowed = asked == 0 or asked <= limit - count
refused = commit and not allowed
if allowed and commit and cost > 0 and not dry then
  if count > 0 then
    redis.call('HINCRBY', h, 'c', ARGV[3])
  else
    redis.call('HSET', h, 'e', fmt(ends), 'c', ARGV[3])
    -- The count is worthless once its period ends; one second of slack (see gcra.lua).
    redis.call('PEXPIRE', h, fmt(math.ceil((ends - now) / 1000) + 1000 + CLOCK_SLACK_MS))
  end
end
return {now, ends, count}
