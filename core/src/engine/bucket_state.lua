-- The token bucket's state, read and written the one way gcra.lua and leased.lua share: a key
-- (KEYS[1]) holding the theoretical arrival time (TAT), '<microseconds>' or
-- '<microseconds>.<nnn>' with the nanoseconds within the microsecond (keys written before ticks
-- were finer than a microsecond hold the first form). Figures are in ticks (ARGV[3] nanoseconds
-- each: `per` ticks a microsecond); they stay below 2^53, where doubles are exact, and absolute
-- instants stay in microseconds (a nanosecond instant would exceed 2^53).
--
-- Each section below (from its `--@NAME` line to the next) replaces the line `--@BUCKET_NAME@`
-- of the engine's body (engine/lua.rs, `expand`): written once, inlined where it runs, because a
-- function would be a closure made at every invocation and a call at every check, which a check
-- this short pays for measurably.
--@TAT
-- tat_us, tat_ns: the TAT in KEYS[1] (0, 0 when absent).
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
--@USED
-- used: ticks of the bucket in use at `now`, from now to the TAT, 0 when past, at most
-- max_ahead (a state written under another spec may run further ahead). The product is
-- compared before it is used: beyond 2^53 it rounds.
local used = 0
if tat_us >= now then
  used = (tat_us - now) * per
  if used >= max_ahead then
    used = max_ahead
  else
    used = math.min(used + math.floor(tat_ns / tick), max_ahead)
  end
end
--@WRITE
-- Writes `used` ticks in use at `now` to KEYS[1], or deletes it when none are. Every number is
-- formatted with %d (tostring() would write large ones as 1.7e+15). The key outlives the
-- instant its bucket becomes full by 1 s of slack, so that a manual clock's time (tests) or a
-- slow round trip never expires live state early; stale state is harmless. fmod is exact on
-- doubles, so the split into microseconds and ticks is too.
if used > 0 then
  local rest = math.fmod(used, per)
  local new_us = now + (used - rest) / per
  local ttl_ms = math.ceil((used - rest) / per / 1000) + 1001 + CLOCK_SLACK_MS
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
