-- The exact sliding window (single and multi-window). Mirrors core/src/engine/log.rs.
-- KEYS[1]  a ZSET of admissions: score = admission instant (µs), member = the cumulative cost up
--          to and including it, zero-padded to 16 digits so that members with equal scores sort
--          in admission order; cumulative sums make any window's count one subtraction
-- KEYS[2]  the cumulative cost of the admissions already dropped (string)
-- KEYS[3]  `<longest>:<fingerprint>` (string): the longest interval of any configuration that
--          used the log, and the fingerprint of the one that recorded last. Limiters of one name
--          share the log whatever their windows; entries are kept for that longest interval, so
--          a shorter window never deletes what a longer one counts, and keys' TTLs cover it.
-- ARGV[1]  'check' | 'peek' | 'settle'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  cost (settle: the cost the call was charged)
-- ARGV[4]  longest interval (µs) of this configuration
-- ARGV[5]  this configuration's fingerprint
-- ARGV[6]  number of windows, then for each: limit, interval_us
-- then, for a settle: the actual cost, and the instant (µs) the call was admitted at; a settle
-- is answered as a peek after it
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, now_us, mismatch} and, for
-- several windows, {window_us, limit, remaining, retry_after_us, reset_after_us} per window
-- appended; mismatch is 1 when another configuration recorded last. A dry check (see wrapper.lua)
-- records nothing: its reply counts the window without it.

local log, dropped_key, seen_key = KEYS[1], KEYS[2], KEYS[3]
local commit = ARGV[1] == 'check'
local now = now_us(ARGV)
local cost = tonumber(ARGV[3])
local asked = commit and cost or 1
local n = tonumber(ARGV[6])
local fingerprint = ARGV[5]
local seen_longest, seen_cfg = string.match(redis.call('GET', seen_key) or '', '^(%d+):(%d+)$')
local mismatch = (seen_cfg and seen_cfg ~= fingerprint) and 1 or 0
local longest = math.max(tonumber(ARGV[4]), tonumber(seen_longest or '0'))
local fmt = function(x) return string.format('%d', x) end
local member = function(cum) return string.format('%016d', cum) end
local MAX_CUM = 9007199254740992 -- 2^53: beyond it doubles lose units

-- The cumulative cost of the newest admission at or before `instant`, or of the dropped prefix.
-- Each instant is read once per call (`at_or_before`): a check asks the same instants several
-- times, and each `redis.call` costs the server more than the rest of a step. What was read is
-- dropped when the log is rewritten (a rebase, a settle); trimming and recording keep it
-- true: a trim removes admissions at or before the cutoff and sets `dropped` to the cumulative
-- cost there, which is what any instant at or after it (every instant asked: `longest` is at
-- least every window) still reads; a record adds an admission at `now`, after every instant
-- asked (now - interval), unless its member was already in the log (it then moved: read again).
local dropped = tonumber(redis.call('GET', dropped_key) or '0')
local at_or_before = {}
-- The newest admission (by instant, then cumulative cost), read once: its cumulative cost, and
-- its instant (false: the log is empty); nil until read.
local newest_cum, newest_at
local function cum_at_or_before(instant)
  local known = at_or_before[instant]
  if known then return known end
  local last = redis.call('ZREVRANGEBYSCORE', log, fmt(instant), '-inf', 'LIMIT', 0, 1)
  known = last[1] and tonumber(last[1]) or dropped
  at_or_before[instant] = known
  return known
end

-- Forget admissions older than the longest window.
local trimmed = false
if now >= longest then
  local cutoff = now - longest
  local gone = cum_at_or_before(cutoff)
  if gone ~= dropped then
    redis.call('ZREMRANGEBYSCORE', log, '-inf', fmt(cutoff))
    dropped = gone
    trimmed = true
  end
end

local function last_cum()
  if newest_cum == nil then
    local newest = redis.call('ZREVRANGE', log, 0, 0, 'WITHSCORES')
    if newest[1] then
      newest_cum, newest_at = tonumber(newest[1]), tonumber(newest[2])
    else
      newest_cum, newest_at = dropped, false
    end
  end
  return newest_cum
end

-- Cumulative sums only grow; rebase them on the rare day they would leave exact doubles.
if commit and last_cum() + cost > MAX_CUM then
  local entries = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
  redis.call('DEL', log)
  for i = 1, #entries, 2 do
    redis.call('ZADD', log, entries[i + 1], member(tonumber(entries[i]) - dropped))
  end
  dropped = 0
  trimmed = true
  at_or_before, newest_cum, newest_at = {}, nil, nil -- the log was rewritten
end

if ARGV[1] == 'settle' then
  -- The rule of a settle (`Log::settle`): a charge is an admission now, even past the limits; a
  -- refund takes back, from the admission made at the call's instant, up to what it holds, if it
  -- is still in the log, and the admissions after it move down with it.
  local actual, at = tonumber(ARGV[7 + 2 * n]), tonumber(ARGV[8 + 2 * n])
  if actual > cost then
    redis.call('ZADD', log, fmt(now), member(last_cum() + actual - cost))
    trimmed = true
  elseif actual < cost then
    local here = redis.call('ZRANGEBYSCORE', log, fmt(at), fmt(at))
    if here[1] then
      local upto = tonumber(here[#here])
      local held = upto - cum_at_or_before(at - 1)
      local taken = math.min(cost - actual, held)
      local later = redis.call('ZRANGEBYSCORE', log, '(' .. fmt(at), '+inf', 'WITHSCORES')
      redis.call('ZREMRANGEBYSCORE', log, fmt(at), '+inf')
      if taken < held then redis.call('ZADD', log, fmt(at), member(upto - taken)) end
      for i = 1, #later, 2 do redis.call('ZADD', log, later[i + 1], member(tonumber(later[i]) - taken)) end
      trimmed = true
    end
  end
  commit, asked = false, 1
  at_or_before, newest_cum, newest_at = {}, nil, nil -- the log was rewritten
end

local function window_count(interval)
  local before = (now >= interval) and cum_at_or_before(now - interval) or dropped
  return last_cum() - before, before
end

local allowed = true
for i = 1, n do
  local limit, interval = tonumber(ARGV[5 + 2 * i]), tonumber(ARGV[6 + 2 * i])
  -- Cost 0 is always admitted, even above a limit (a same-named limiter may be larger).
  -- (Compared by subtraction: `count + asked` may pass 2^53, where doubles round.)
  if asked > 0 and asked > limit - window_count(interval) then allowed = false end
end

refused = commit and not allowed
local record = allowed and commit and cost > 0 and not dry
if record then
  local cum = last_cum() + cost
  if redis.call('ZADD', log, fmt(now), member(cum)) == 1 then
    -- It is the newest unless one was recorded at a later instant (a clock that went back).
    if not (newest_at and newest_at > now) then newest_cum, newest_at = cum, now end
  else
    -- The member was there already (after a clock went back, cumulative costs repeat): ZADD
    -- moved it to now, which changes what earlier instants read.
    at_or_before, newest_cum, newest_at = {}, nil, nil
  end
end
if record or trimmed then
  -- One second of slack: see gcra.lua.
  local ttl = fmt(math.ceil(longest / 1000) + 1000 + CLOCK_SLACK_MS)
  redis.call('PEXPIRE', log, ttl)
  redis.call('SET', dropped_key, fmt(dropped), 'PX', ttl)
  redis.call('SET', seen_key, fmt(longest) .. ':' .. ((record or not seen_cfg) and fingerprint or seen_cfg), 'PX', ttl)
end

last_cum()
-- A dry check that admits answers as if it had recorded its admission now.
local pending = (dry and commit and allowed) and cost or 0
if pending > 0 then newest_at = now end
local best_remaining, best_limit, retry, reset = nil, 0, 0, 0
local details = {}
for i = 1, n do
  local limit, interval = tonumber(ARGV[5 + 2 * i]), tonumber(ARGV[6 + 2 * i])
  local count, before = window_count(interval)
  count = count + pending
  local over = asked - (limit - count)
  local w_retry = 0
  if not allowed and over > 0 then
    -- Binary search by rank for the first admission whose departure frees enough.
    local target = before + over
    local lo = (now >= interval) and redis.call('ZCOUNT', log, '-inf', fmt(now - interval)) or 0
    local hi = redis.call('ZCARD', log) - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if tonumber(redis.call('ZRANGE', log, mid, mid)[1]) >= target then hi = mid else lo = mid + 1 end
    end
    -- When no departure frees enough (the cost alone is above the limit: a live override's
    -- smaller limit), the search ends on the newest admission in the window, or on none when
    -- the window is empty: refused for a whole interval (as Log::evaluate says).
    local found = redis.call('ZRANGE', log, lo, lo, 'WITHSCORES')
    if count > 0 and found[2] then w_retry = tonumber(found[2]) + interval - now else w_retry = interval end
  end
  local w_reset = 0
  if count > 0 then w_reset = newest_at + interval - now end
  local remaining = math.max(limit - count, 0)
  if best_remaining == nil or remaining < best_remaining then
    best_remaining, best_limit = remaining, limit
  end
  retry = math.max(retry, w_retry)
  reset = math.max(reset, w_reset)
  if n > 1 then
    for _, v in ipairs({interval, limit, remaining, w_retry, w_reset}) do details[#details + 1] = v end
  end
end

local reply = {allowed and 1 or 0, best_limit, best_remaining, allowed and 0 or retry, reset, now, mismatch}
for _, v in ipairs(details) do reply[#reply + 1] = v end
return reply
