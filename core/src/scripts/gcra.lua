-- GCRA (virtual scheduling): token bucket, leaky bucket and points. The rule is
-- core/src/limiter/gcra.rs; this script applies its writes, and the caller replays the rule on
-- what the script read to build the decision (so the decision is computed in one place).
-- KEYS[1]  the theoretical arrival time (TAT), integer microseconds as a decimal string
-- ARGV[1]  'check' | 'peek' | 'adjust'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  emission interval T (microseconds per unit)
-- ARGV[4]  tau = capacity * T
-- ARGV[5]  cost (check) or estimate (adjust)
-- ARGV[6]  actual (adjust)
-- Returns {tat, now}: the TAT before this call and the instant it was decided at.
-- Written inline, without local functions: a closure per call costs the server measurably.
-- Every number written is formatted with %d: Lua numbers are doubles and tostring() would
-- serialise large ones as 1.7e+15, losing microseconds. Keys outlive the instant their state
-- becomes empty (a full bucket) by 1 s of slack, so that a manual clock's time (tests) or a slow
-- round trip never expires live state early; stale state is harmless.

local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local op = ARGV[1]
if op == 'peek' then return {tat, now} end

local T = tonumber(ARGV[3])
local new_tat
if op == 'check' then
  local tau, cost = tonumber(ARGV[4]), tonumber(ARGV[5])
  local used = tat - now
  if used < 0 then used = 0 end
  -- Compared as `cost*T > tau - used`: the sum `used + cost*T` may exceed 2^53, where doubles
  -- round. Cost 0 is admitted and records nothing.
  if cost == 0 or used > tau or cost * T > tau - used then return {tat, now} end
  new_tat = now + used + cost * T
else
  -- adjust: charge the difference (possibly beyond capacity) or refund it (never beyond full).
  local estimate, actual = tonumber(ARGV[5]), tonumber(ARGV[6])
  new_tat = math.max(tat, now)
  if actual >= estimate then
    new_tat = new_tat + (actual - estimate) * T
  else
    new_tat = math.max(new_tat - (estimate - actual) * T, now)
  end
  if new_tat == tat or (new_tat <= now and tat <= now) then return {tat, now} end
end

if new_tat > now then
  local ttl_ms = math.ceil((new_tat - now) / 1000) + 1000
  redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', string.format('%d', ttl_ms))
else
  redis.call('DEL', KEYS[1])
end
return {tat, now}
