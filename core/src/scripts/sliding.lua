-- Counters over sub-buckets (Carlson's sliding window); also the fixed-window `bucket` limiter.
-- The rule is core/src/limiter/sliding.rs: this script drops the blocks that stopped counting,
-- records an admitted call, and returns the counts it read; the caller replays the rule on them
-- to build the decision (so the decision is computed in one place).
-- KEYS[1]  a HASH with one field per non-empty block of each limit: `<d>:<p>:<block id>` (duration
--          and precision in microseconds) = the block's count. Reading it whole costs
--          O(non-empty blocks), never O(duration/precision).
-- ARGV[1]  'check' | 'peek'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  cost
-- ARGV[4]  number of limits, then for each: limit, duration_us, precision_us, blocks
-- Returns {now, then per limit: the number of counting blocks n, then n pairs of block id and
-- count}: the counts before this call, in no particular order.
-- Numbers are written with %d: tostring() would serialise large doubles as 1.7e+15.

local key = KEYS[1]
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local commit = ARGV[1] == 'check'
local cost = tonumber(ARGV[3])
local asked = commit and cost or 1
local n = tonumber(ARGV[4])

local limits, by_prefix = {}, {}
for i = 1, n do
  local base = 4 + (i - 1) * 4
  local precision, blocks = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local current = math.floor(now / precision)
  local l = {
    limit = tonumber(ARGV[base + 1]),
    -- The arguments are written in decimal already: the field prefix is them as sent.
    prefix = ARGV[base + 2] .. ':' .. ARGV[base + 3] .. ':',
    current = current,
    first_counted = current - blocks + 1,
    -- When the current block stops counting.
    ends = (current + blocks) * precision,
    found = {},
    total = 0,
    has_current = false,
  }
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
      local found = l.found
      found[#found + 1] = id
      found[#found + 1] = count
      l.total = l.total + count
      if id == l.current then l.has_current = true end
    end
  end
end
if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end

-- Cost 0 is always admitted, even above a limit (a same-named limiter may be larger).
-- (Compared by subtraction: `total + asked` may pass 2^53, where doubles round.)
local allowed = true
for i = 1, n do
  local l = limits[i]
  if asked > 0 and asked > l.limit - l.total then allowed = false end
end

local record = allowed and commit and cost > 0
local reply, expire_at, new_block = {now}, 0, false
for i = 1, n do
  local l = limits[i]
  reply[#reply + 1] = #l.found / 2
  for _, v in ipairs(l.found) do reply[#reply + 1] = v end
  if record then
    redis.call('HINCRBY', key, l.prefix .. string.format('%d', l.current), ARGV[3])
    if l.ends > expire_at then expire_at = l.ends end
    new_block = new_block or not l.has_current
  end
end
-- The key expires one second (of slack: see gcra.lua) after its newest block stops counting. The
-- newest blocks are the current ones, so the expiry moves only when one of them is new.
if new_block then
  redis.call('PEXPIRE', key, string.format('%d', math.ceil((expire_at - now) / 1000) + 1000))
end
return reply
