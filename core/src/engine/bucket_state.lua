-- The token bucket's state, read and written the one way gcra.lua and leased.lua share: a key
-- holding the theoretical arrival time (TAT), '<microseconds>' or '<microseconds>.<nnn>' with
-- the nanoseconds within the microsecond (keys written before ticks were finer than a
-- microsecond hold the first form). Figures are in ticks (ARGV[3] nanoseconds each: `per`
-- ticks a microsecond); they stay below 2^53, where doubles are exact, and absolute instants
-- stay in microseconds (a nanosecond instant would exceed 2^53). Defined once per invocation
-- in the prelude: a closure made per call costs the server measurably.

-- The TAT in `key`: microseconds, and nanoseconds within the microsecond (0, 0 when absent).
local function bucket_tat(key)
  local raw = redis.call('GET', key)
  if not raw then return 0, 0 end
  local dot = string.find(raw, '.', 1, true)
  if not dot then return tonumber(raw), 0 end
  return tonumber(string.sub(raw, 1, dot - 1)), tonumber(string.sub(raw, dot + 1))
end

-- Ticks of the bucket in use at `now`: from now to the TAT, 0 when past, at most max_ahead (a
-- state written under another spec may run further ahead). The product is compared before it
-- is used: beyond 2^53 it rounds.
local function bucket_used(tat_us, tat_ns, now, per, tick, max_ahead)
  if tat_us < now then return 0 end
  local used = (tat_us - now) * per
  if used >= max_ahead then return max_ahead end
  return math.min(used + math.floor(tat_ns / tick), max_ahead)
end

-- Writes `used` ticks in use at `now` to `key`, or deletes it when none are. Every number is
-- formatted with %d (tostring() would write large ones as 1.7e+15). The key outlives the
-- instant its bucket becomes full by 1 s of slack, so that a manual clock's time (tests) or a
-- slow round trip never expires live state early; stale state is harmless.
local function bucket_write(key, used, now, per, tick)
  if used <= 0 then
    redis.call('DEL', key)
    return
  end
  -- fmod is exact on doubles, so the split into microseconds and ticks is too.
  local rest = math.fmod(used, per)
  local new_us = now + (used - rest) / per
  local ttl_ms = math.ceil((used - rest) / per / 1000) + 1001 + CLOCK_SLACK_MS
  local value
  if rest == 0 then
    value = string.format('%d', new_us)
  else
    value = string.format('%d.%03d', new_us, rest * tick)
  end
  redis.call('SET', key, value, 'PX', string.format('%d', ttl_ms))
end
