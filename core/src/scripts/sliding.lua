-- Counters over sub-buckets (Carlson's sliding window); also the fixed-window `bucket` limiter.
-- Mirrors core/src/limiter/sliding.rs.
-- KEYS[1]  a HASH holding, per limit `<d>:<p>` (duration and precision in microseconds):
--            `<d>:<p>:t` total of the counted blocks, `<d>:<p>:o` oldest block that may be
--            non-empty, `<d>:<p>:n` newest block written, `<d>:<p>:<block id>` a block's count
-- ARGV[1]  'check' | 'peek'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  cost
-- ARGV[4]  number of limits, then for each: limit, duration_us, precision_us, blocks
-- Returns {allowed, limit, remaining, retry_after_us, reset_after_us, now_us} and, for several
-- limits, {window_us, limit, remaining, retry_after_us, reset_after_us} per limit appended.
-- Numbers are written with %d: tostring() would serialise large doubles as 1.7e+15.

local function now_us()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local key = KEYS[1]
local commit = ARGV[1] == 'check'
local now = now_us()
local cost = tonumber(ARGV[3])
local asked = commit and cost or 1
local n = tonumber(ARGV[4])
local fmt = function(x) return string.format('%d', x) end

local limits = {}
local allowed = true
for i = 1, n do
  local base = 4 + (i - 1) * 4
  local l = {
    limit = tonumber(ARGV[base + 1]), duration = tonumber(ARGV[base + 2]),
    precision = tonumber(ARGV[base + 3]), blocks = tonumber(ARGV[base + 4]),
  }
  l.prefix = fmt(l.duration) .. ':' .. fmt(l.precision) .. ':'
  l.current = math.floor(now / l.precision)
  local first_counted = l.current - l.blocks + 1
  -- Drop the blocks that stopped counting; non-empty blocks all lie in [o, o + blocks - 1].
  local o = tonumber(redis.call('HGET', key, l.prefix .. 'o') or first_counted)
  l.total = tonumber(redis.call('HGET', key, l.prefix .. 't') or '0')
  if o < first_counted then
    local dropped, fields = 0, {}
    for b = o, math.min(first_counted - 1, o + l.blocks - 1) do
      local count = redis.call('HGET', key, l.prefix .. fmt(b))
      if count then
        dropped = dropped + tonumber(count)
        fields[#fields + 1] = l.prefix .. fmt(b)
      end
    end
    if #fields > 0 then redis.call('HDEL', key, unpack(fields)) end
    l.total = l.total - dropped
    o = first_counted
    redis.call('HSET', key, l.prefix .. 'o', fmt(o), l.prefix .. 't', fmt(l.total))
  end
  l.oldest = o
  l.newest = tonumber(redis.call('HGET', key, l.prefix .. 'n') or '-1')
  -- Cost 0 is always admitted, even above a limit (a same-named limiter may be larger).
  -- (Compared by subtraction: `total + asked` may pass 2^53, where doubles round.)
  if asked > 0 and asked > l.limit - l.total then allowed = false end
  limits[i] = l
end

local record = allowed and commit and cost > 0
local expire_at = 0
local best_remaining, best_limit, retry, reset = nil, 0, 0, 0
local details = {}
for i = 1, n do
  local l = limits[i]
  if record then
    redis.call('HINCRBY', key, l.prefix .. fmt(l.current), fmt(cost))
    l.total = l.total + cost
    l.newest = l.current
    redis.call('HSET', key, l.prefix .. 't', fmt(l.total), l.prefix .. 'n', fmt(l.current), l.prefix .. 'o', fmt(l.oldest))
  end
  local over = asked - (l.limit - l.total)
  local l_retry = 0
  if not allowed and over > 0 then
    -- The oldest blocks leave first: find the one whose departure frees enough.
    local freed = 0
    for b = l.oldest, l.current do
      local count = redis.call('HGET', key, l.prefix .. fmt(b))
      if count then
        freed = freed + tonumber(count)
        if freed >= over then
          l_retry = (b + l.blocks) * l.precision - now
          break
        end
      end
    end
  end
  local l_reset = 0
  if l.total > 0 then
    l_reset = (l.newest + l.blocks) * l.precision - now
    expire_at = math.max(expire_at, (l.newest + l.blocks) * l.precision)
  end
  local remaining = math.max(l.limit - l.total, 0)
  if best_remaining == nil or remaining < best_remaining then
    best_remaining, best_limit = remaining, l.limit
  end
  retry = math.max(retry, l_retry)
  reset = math.max(reset, l_reset)
  if n > 1 then
    for _, v in ipairs({l.duration, l.limit, remaining, l_retry, l_reset}) do details[#details + 1] = v end
  end
end

if record then
  -- One second of slack: see gcra.lua.
  redis.call('PEXPIRE', key, fmt(math.ceil((expire_at - now) / 1000) + 1000))
end
local reply = {allowed and 1 or 0, best_limit, best_remaining, allowed and 0 or retry, reset, now}
for _, v in ipairs(details) do reply[#reply + 1] = v end
return reply
