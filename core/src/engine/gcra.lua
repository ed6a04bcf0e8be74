-- GCRA (virtual scheduling): token bucket, leaky bucket and points. The rule is
-- core/src/engine/gcra.rs; this script applies its writes, and the caller replays the rule on
-- what the script read to build the decision (so the decision is computed in one place).
-- KEYS[1]  the theoretical arrival time (TAT): '<microseconds>' or '<microseconds>.<nnn>' with
--          the nanoseconds within the microsecond (keys written before ticks were finer than a
--          microsecond hold the first form)
-- ARGV[1]  'check' | 'peek' | 'adjust' | 'settle' (a settle is an adjust of the call's cost to
--          its actual cost; the wrapper makes it apply once per id)
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  nanoseconds per tick: 1, 10, 100 or 1000; every figure below is in ticks
-- ARGV[4]  emission interval T (ticks per unit)
-- ARGV[5]  tau = capacity * T
-- ARGV[6]  max_ahead: how far ahead of now the TAT may run (tau plus the largest debt)
-- ARGV[7]  cost (check) or estimate (adjust, settle)
-- ARGV[8]  actual (adjust, settle)
-- ARGV[9]  settle: the instant the call was charged (µs); a refund gives back at most what of
--          the call's charge time has not yet refilled since then (see `Gcra::adjust`)
-- Returns {tat_us, tat_ns, now}: the TAT before this call (microseconds, and nanoseconds within
-- the microsecond) and the instant it was decided at. A refused check sets `refused`;
-- a dry check writes nothing (see script.rs).
-- Written inline, without local functions: a closure per call costs the server measurably (a
-- settle's charge is `settle_charge` of the script's prelude, settle_charge.lua, defined once
-- per invocation).
-- Every figure stays below 2^53 ticks (the caller chooses the tick so), where doubles are exact;
-- absolute instants are kept in microseconds (a nanosecond instant would exceed 2^53).
-- Every number written is formatted with %d: tostring() would serialise large ones as
-- 1.7e+15. Keys outlive the instant their state becomes empty (a full bucket) by 1 s of slack,
-- so that a manual clock's time (tests) or a slow round trip never expires live state early;
-- stale state is harmless.

local now = now_us(ARGV)
local tat_us, tat_ns = 0, 0
local raw = redis.call('GET', KEYS[1])
if raw then
  local dot = string.find(raw, '.', 1, true)
  if dot then
    tat_us = tonumber(string.sub(raw, 1, dot - 1))
    tat_ns = tonumber(string.sub(raw, dot + 1))
  else
    tat_us = tonumber(raw)
  end
end
local op = ARGV[1]
if op == 'peek' then return {tat_us, tat_ns, now} end

local tick, T, tau, max_ahead = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local per = 1000 / tick
-- Ticks from now to the TAT, 0 when past, at most max_ahead (a state written under another spec
-- may run further ahead). The product is compared before it is used: beyond 2^53 it rounds.
local used = 0
if tat_us >= now then
  used = (tat_us - now) * per
  if used >= max_ahead then
    used = max_ahead
  else
    used = math.min(used + math.floor(tat_ns / tick), max_ahead)
  end
end

local new_used
if op == 'check' then
  local cost = tonumber(ARGV[7])
  -- Compared as `cost*T > tau - used`: the sum `used + cost*T` may exceed 2^53, where doubles
  -- round. Cost 0 is admitted and records nothing.
  if cost == 0 or cost * T > tau - used then
    refused = cost > 0
    return {tat_us, tat_ns, now}
  end
  -- Admitted: a `check_all` deciding before it writes (`dry`, see script.rs) stops here.
  if dry then return {tat_us, tat_ns, now} end
  new_used = used + cost * T
else
  -- adjust or settle: charge the difference, possibly beyond capacity up to max_ahead (debt), or refund
  -- it (never beyond full).
  local estimate, actual = tonumber(ARGV[7]), tonumber(ARGV[8])
  if actual >= estimate then
    new_used = settle_charge(used, actual - estimate, T, max_ahead)
  else
    local back = (estimate - actual) * T
    if op == 'settle' then
      -- Ticks of the call's charge not yet refilled: its cost, less the time since it was charged
      -- (compared before subtracting: the product may exceed 2^53 where doubles round).
      local elapsed, charged = math.max(now - tonumber(ARGV[9]), 0) * per, estimate * T
      if elapsed >= charged then back = 0 else back = math.min(back, charged - elapsed) end
    end
    new_used = math.max(used - back, 0)
  end
  if new_used == used then return {tat_us, tat_ns, now} end
end

if new_used > 0 then
  -- fmod is exact on doubles, so the split into microseconds and ticks is too.
  local rest = math.fmod(new_used, per)
  local new_us = now + (new_used - rest) / per
  local ttl_ms = math.ceil((new_used - rest) / per / 1000) + 1001 + CLOCK_SLACK_MS
  local value
  if rest == 0 then
    value = string.format('%d', new_us)
  else
    value = string.format('%d.%03d', new_us, rest * tick)
  end
  redis.call('SET', KEYS[1], value, 'PX', string.format('%d', ttl_ms))
else
  redis.call('DEL', KEYS[1])
end
return {tat_us, tat_ns, now}
