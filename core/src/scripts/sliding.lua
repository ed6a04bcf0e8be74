-- Counters over sub-buckets (Carlson's sliding window); also the fixed-window `bucket` limiter.
-- Mirrors core/src/limiter/sliding.rs.
-- KEYS[1]  a HASH with one field per non-empty block of each limit: `<d>:<p>:<block id>` (duration
--          and precision in microseconds) = the block's count. Reading it whole costs
--          O(non-empty blocks), never O(duration/precision).
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

local limits, by_prefix = {}, {}
for i = 1, n do
  local base = 4 + (i - 1) * 4
  local l = {
    limit = tonumber(ARGV[base + 1]), duration = tonumber(ARGV[base + 2]),
    precision = tonumber(ARGV[base + 3]), blocks = tonumber(ARGV[base + 4]),
    ids = {}, counts = {}, total = 0,
  }
  l.prefix = fmt(l.duration) .. ':' .. fmt(l.precision) .. ':'
  l.current = math.floor(now / l.precision)
  l.first_counted = l.current - l.blocks + 1
  limits[i] = l
  by_prefix[l.prefix] = l
end

-- Sort the stored blocks into their limits; drop those that stopped counting.
local stale = {}
local fields = redis.call('HGETALL', key)
for f = 1, #fields, 2 do
  local field = fields[f]
  local split = string.find(field, ':[^:]*$')
  local l = split and by_prefix[string.sub(field, 1, split)]
  if l then
    local id = tonumber(string.sub(field, split + 1))
    if id < l.first_counted then
      stale[#stale + 1] = field
    else
      local count = tonumber(fields[f + 1])
      l.ids[#l.ids + 1] = id
      l.counts[id] = count
      l.total = l.total + count
    end
  end
end
if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end

local allowed = true
for i = 1, n do
  local l = limits[i]
  -- Cost 0 is always admitted, even above a limit (a same-named limiter may be larger).
  -- (Compared by subtraction: `total + asked` may pass 2^53, where doubles round.)
  if asked > 0 and asked > l.limit - l.total then allowed = false end
end

local record = allowed and commit and cost > 0
local expire_at = 0
local best_remaining, best_limit, retry, reset = nil, 0, 0, 0
local details = {}
for i = 1, n do
  local l = limits[i]
  if record then
    redis.call('HINCRBY', key, l.prefix .. fmt(l.current), fmt(cost))
    if not l.counts[l.current] then l.ids[#l.ids + 1] = l.current end
    l.counts[l.current] = (l.counts[l.current] or 0) + cost
    l.total = l.total + cost
  end
  table.sort(l.ids)
  local over = asked - (l.limit - l.total)
  local l_retry = 0
  if not allowed and over > 0 then
    -- The oldest blocks leave first: find the one whose departure frees enough.
    local freed = 0
    for _, id in ipairs(l.ids) do
      freed = freed + l.counts[id]
      if freed >= over then
        l_retry = (id + l.blocks) * l.precision - now
        break
      end
    end
  end
  local l_reset = 0
  if #l.ids > 0 then
    local newest_end = (l.ids[#l.ids] + l.blocks) * l.precision
    l_reset = newest_end - now
    expire_at = math.max(expire_at, newest_end)
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
