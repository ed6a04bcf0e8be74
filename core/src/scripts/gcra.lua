-- GCRA (virtual scheduling): token bucket, leaky bucket and points. Mirrors core/src/limiter/gcra.rs.
-- KEYS[1]  the theoretical arrival time (TAT), integer microseconds as a decimal string
-- ARGV[1]  'check' | 'peek' | 'adjust'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  emission interval T (microseconds per unit)
-- ARGV[4]  tau = capacity * T
-- ARGV[5]  capacity
-- ARGV[6]  cost (check) or estimate (adjust)
-- ARGV[7]  actual (adjust)
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, now_us}.
-- Every number written is formatted with %d: Lua numbers are doubles and tostring() would
-- serialise large ones as 1.7e+15, losing microseconds.

local function now_us()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- floor(a / b) for non-negative integers, exact even where the double quotient rounds up.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local op = ARGV[1]
local now = now_us()
local T = tonumber(ARGV[3])
local tau = tonumber(ARGV[4])
local capacity = tonumber(ARGV[5])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local used = math.max(tat - now, 0)

-- Keys outlive the instant their state becomes empty by this much, so that a manual clock's
-- time (tests) or a slow round trip never expires live state early; stale state is harmless.
local TTL_SLACK_MS = 1000

local function store(new_tat)
  if new_tat > now then
    -- The state equals a full bucket once now passes the TAT: expire it then.
    local ttl = math.ceil((new_tat - now) / 1000) + TTL_SLACK_MS
    redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', string.format('%d', ttl))
  else
    redis.call('DEL', KEYS[1])
  end
end

if op == 'adjust' then
  local estimate, actual = tonumber(ARGV[6]), tonumber(ARGV[7])
  local base = math.max(tat, now)
  if actual >= estimate then
    base = base + (actual - estimate) * T
  else
    base = math.max(base - (estimate - actual) * T, now)
  end
  if base ~= tat and not (base <= now and tat <= now) then store(base) end
  used = math.max(base - now, 0)
  op = 'peek'
end

local cost = 1
if op == 'check' then cost = tonumber(ARGV[6]) end
local after = used + cost * T
local available = idiv(math.max(tau - used, 0), T)
-- Compared as `cost*T > tau - used`: the sum `used + cost*T` may exceed 2^53, where doubles
-- round. Cost 0 is always admitted, even after an overcharge pushed `used` beyond tau.
if cost > 0 and (used > tau or cost * T > tau - used) then
  return {0, capacity, available, cost * T - (tau - used), used, now}
end
if op ~= 'check' or cost == 0 then
  return {1, capacity, available, 0, used, now}
end
store(now + after)
return {1, capacity, idiv(tau - after, T), 0, after, now}
