-- Counters over sub-buckets (Carlson's sliding window); also the fixed-window `bucket` limiter.
-- The rule is core/src/engine/sliding.rs: this script drops blocks that stopped counting (in
-- bounded chunks), records an admitted call, and returns what the rule reads of each limit; the
-- caller replays the rule on it to build the decision (so the decision is computed in one place).
-- Work and reply are O(limits × log(blocks)), never O(blocks): every limit keeps a running total.
--
-- Each limit owns the fields and members starting with its prefix `<index>:<duration>:<precision>:`
-- (microseconds), so two limits never share counts, and limiters of one name with other
-- configurations (a rolling deploy) keep theirs: a call reads and deletes only its own limits'.
-- KEYS[1]  a HASH. Per limit of one block (a fixed window): `<prefix>n` the block id, `<prefix>c`
--          its count. Per limit of several blocks: `<prefix>c` the cumulative count C of every
--          unit ever recorded (modulo 2^53), `<prefix>n` the newest non-empty block, `<prefix>f`
--          the cumulative count at the end of the newest deleted block, `<prefix>l` the oldest
--          block that counts (members below it are leftovers of a window that went idle),
--          `<prefix>g` set while such leftovers may remain. `cfg`: the fingerprint of the
--          configuration that last recorded.
-- KEYS[2]  (passed only when some limit has several blocks: fixed windows need the hash alone)
--          a ZSET, all scores 0, one member per non-empty block:
--          `<prefix><block id, 16 digits>:<cumulative count at the end of the block>`. Members
--          sort by block and the cumulative counts grow with them, so the count in a window is C
--          minus the newest stale member's, and the block that frees `over` units is found by a
--          binary search on ranks.
-- ARGV[1]  'check' | 'peek' | 'settle'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  cost (settle: the cost the call was charged)
-- ARGV[4]  the configuration's fingerprint
-- ARGV[5]  the spec, MessagePack values one after the other (engine/packed.rs), read by one
--          `cmsgpack.unpack`: the number of limits n, then for each: its prefix (text), limit,
--          precision_us, blocks; then, for a settle: the actual cost, and the instant (µs) the
--          call was charged at. One argument decoded in C, with the prefixes ready-made, costs
--          the server less than one argument per number read with tonumber and prefixes joined
--          here (see the docs' benchmarks page). The cost and the fingerprint stay apart:
--          check_all's dry run puts the cost it decides at in ARGV[3] (engine/script_all.rs),
--          and the fingerprint is compared and stored as text.
-- Returns {now, mismatch, then per limit: total, newest block or -1, freeing block or -1}: the
-- units counting before this call, the newest counting block, and (refused calls) the block by
-- whose end enough units have left; mismatch is 1 when another configuration recorded last.
-- A refused check sets `refused`; a dry check records nothing (see wrapper.lua).
-- A settle returns the same figures after it, as a peek reads them.
-- Numbers are written with %d: tostring() would serialise large doubles as 1.7e+15.

local h, z = KEYS[1], KEYS[2]
local now = now_us(ARGV)
local commit = ARGV[1] == 'check'
local cost = tonumber(ARGV[3])
local asked = commit and cost or 1
-- The first limit's figures (the path of several limits below reads every limit's).
local n, p, limit, precision, blocks = cmsgpack.unpack(ARGV[5])

-- A fixed window (the `bucket` limiter: one limit of one block) takes this path: the same rule
-- and layout as below, without the tables and helpers that several blocks need (they cost the
-- server a measurable share of a call this short: see the docs' benchmarks page).
if n == 1 and blocks == 1 and ARGV[1] ~= 'settle' then
  local current = math.floor(now / precision)
  local got = redis.call('HMGET', h, 'cfg', p .. 'c', p .. 'n')
  local cfg, c, stored = got[1], tonumber(got[2]), tonumber(got[3])
  local mismatch = (cfg and cfg ~= ARGV[4]) and 1 or 0
  local total, newest = 0, -1
  if stored and stored >= current then total, newest = c, stored end
  if commit and cost > 0 and asked <= limit - total then
    if dry then return {now, mismatch, total, newest, newest} end
    -- A clock that went back records into the newest block: counts never move back in time.
    local block = math.max(current, newest)
    local cfg_changes = mismatch == 1 or not cfg
    if block == stored then
      redis.call('HINCRBY', h, p .. 'c', ARGV[3])
      if cfg_changes then redis.call('HSET', h, 'cfg', ARGV[4]) end
    else
      if cfg_changes then
        redis.call('HSET', h, p .. 'n', string.format('%d', block), p .. 'c', ARGV[3], 'cfg', ARGV[4])
      else
        redis.call('HSET', h, p .. 'n', string.format('%d', block), p .. 'c', ARGV[3])
      end
      local ttl = math.ceil(((block + 1) * precision - now) / 1000) + 1000 + CLOCK_SLACK_MS
      if not cfg or redis.call('PTTL', h) < ttl then redis.call('PEXPIRE', h, string.format('%d', ttl)) end
    end
  elseif commit and cost > 0 then
    refused = true
  end
  return {now, mismatch, total, newest, newest}
end
local fmt = function(x) return string.format('%d', x) end
local pad = function(b) return string.format('%016d', b) end
-- Cumulative counts wrap at 2^53 (beyond it doubles lose units); a window's count, a difference
-- of two of them, stays exact.
local M = 9007199254740992
local function add(a, b) if b >= M - a then return b - (M - a) end return a + b end
local function sub(a, b) local d = a - b if d < 0 then d = d + M end return d end
-- The block id and the cumulative count of a member of prefix `p`.
local function block_of(p, m) return tonumber(string.sub(m, #p + 1, #p + 16)) end
local function cum_of(p, m) return tonumber(string.sub(m, #p + 18)) end
local CHUNK = 128

-- Read every limit's scalars with one HMGET.
local spec = {cmsgpack.unpack(ARGV[5])}
local fields, limits = {'cfg'}, {}
for i = 1, n do
  local base = 1 + (i - 1) * 4
  local p, precision, blocks = spec[base + 1], spec[base + 3], spec[base + 4]
  local current = math.floor(now / precision)
  limits[i] = {
    limit = spec[base + 2], precision = precision, blocks = blocks, p = p, at = #fields,
    current = current, first = current - blocks + 1, total = 0, newest = -1, freeing = -1,
  }
  fields[#fields + 1] = p .. 'c'
  fields[#fields + 1] = p .. 'n'
  if blocks > 1 then
    fields[#fields + 1] = p .. 'f'
    fields[#fields + 1] = p .. 'l'
    fields[#fields + 1] = p .. 'g'
  end
end
local got = redis.call('HMGET', h, unpack(fields))
local cfg = got[1]
local mismatch = (cfg and cfg ~= ARGV[4]) and 1 or 0

for i = 1, n do
  local l = limits[i]
  local o = l.at
  local c, newest = tonumber(got[o + 1]), tonumber(got[o + 2])
  l.c, l.n = c, newest
  if l.blocks == 1 then
    -- A fixed window: one block, its count.
    if newest and newest >= l.current then
      l.total, l.newest, l.freeing = c, newest, newest
    end
  elseif c then
    local p = l.p
    local floor, lo, leftovers = tonumber(got[o + 3] or '0'), tonumber(got[o + 4] or '0'), got[o + 5] == '1'
    local sets = {}
    if newest < l.first then
      -- Everything stopped counting: the window starts afresh, what is stored is leftovers.
      floor, lo, leftovers = c, l.first, true
      sets = {p .. 'f', fmt(floor), p .. 'l', fmt(lo), p .. 'g', '1'}
    else
      l.newest = newest
    end
    -- The newest stale block (not a leftover) holds the count below the window.
    local pred = redis.call('ZREVRANGEBYLEX', z, '(' .. p .. pad(l.first), '[' .. p .. pad(lo), 'LIMIT', 0, 1)[1]
    local below = pred and cum_of(p, pred) or floor
    l.total = sub(c, below)
    -- Delete stale members, at most CHUNK per call, oldest first.
    if pred or leftovers then
      local last = redis.call('ZRANGEBYLEX', z, '[' .. p, '(' .. p .. pad(l.first), 'LIMIT', CHUNK - 1, 1)[1]
      if last then
        redis.call('ZREMRANGEBYLEX', z, '[' .. p, '[' .. last)
        if block_of(p, last) >= lo then floor = cum_of(p, last) end
      else
        redis.call('ZREMRANGEBYLEX', z, '[' .. p, '(' .. p .. pad(l.first))
        floor = below
        sets[#sets + 1] = p .. 'g'
        sets[#sets + 1] = '0'
      end
      sets[#sets + 1] = p .. 'f'
      sets[#sets + 1] = fmt(floor)
    end
    if #sets > 0 then redis.call('HSET', h, unpack(sets)) end
    l.below, l.floor, l.lo = below, floor, lo
  end
end

if ARGV[1] == 'settle' then
  -- The rule of a settle (`Sliding::settle`): a charge is recorded like an admitted call, in the
  -- newest block, even past the limit; a refund gives back, in every limit, up to the units
  -- recorded in the block the call was charged in, if that block still counts (the cumulative
  -- counts of the blocks after it move down with it). Then the state is read as a peek.
  local actual, at = spec[2 + 4 * n], spec[3 + 4 * n]
  for i = 1, n do
    local l = limits[i]
    local p = l.p
    if actual > cost then
      local units = actual - cost
      local block = math.max(l.current, l.newest)
      local ends = (block + l.blocks) * l.precision
      if l.blocks == 1 then
        if block == l.n then
          redis.call('HINCRBY', h, p .. 'c', fmt(units))
        else
          redis.call('HSET', h, p .. 'n', fmt(block), p .. 'c', fmt(units))
        end
      else
        local c = l.c or 0
        local after = add(c, units)
        redis.call('ZADD', z, 0, p .. pad(block) .. ':' .. fmt(after))
        if block == l.newest then
          redis.call('ZREM', z, p .. pad(block) .. ':' .. fmt(c))
          redis.call('HSET', h, p .. 'c', fmt(after))
        else
          local sets = {p .. 'c', fmt(after), p .. 'n', fmt(block)}
          if not l.c then
            for _, v in ipairs({p .. 'f', '0', p .. 'l', fmt(l.first), p .. 'g', '1'}) do sets[#sets + 1] = v end
          end
          redis.call('HSET', h, unpack(sets))
        end
        local ttl = math.ceil((ends - now) / 1000) + 1000 + CLOCK_SLACK_MS
        if redis.call('PTTL', z) < ttl then redis.call('PEXPIRE', z, fmt(ttl)) end
        l.c = after
      end
      local ttl = math.ceil((ends - now) / 1000) + 1000 + CLOCK_SLACK_MS
      if redis.call('PTTL', h) < ttl then redis.call('PEXPIRE', h, fmt(ttl)) end
      l.total, l.newest, l.n = l.total + units, block, block
      if l.blocks == 1 then l.freeing = block end
    elseif actual < cost then
      local units = cost - actual
      local block = math.floor(at / l.precision)
      if l.blocks == 1 then
        if l.newest == block and l.total > 0 then
          local taken = math.min(units, l.total)
          if taken == l.total then
            redis.call('HDEL', h, p .. 'n', p .. 'c')
            l.newest, l.freeing, l.n = -1, -1, nil
          else
            redis.call('HINCRBY', h, p .. 'c', fmt(-taken))
          end
          l.total = l.total - taken
        end
      elseif l.c and block >= l.first and block <= l.newest then
        local members = redis.call('ZRANGEBYLEX', z, '[' .. p .. pad(block), '(' .. string.sub(p, 1, -2) .. ';')
        if members[1] and block_of(p, members[1]) == block then
          local pred = redis.call('ZREVRANGEBYLEX', z, '(' .. p .. pad(block), '[' .. p .. pad(l.lo), 'LIMIT', 0, 1)[1]
          local before = pred and cum_of(p, pred) or l.floor
          local held = sub(cum_of(p, members[1]), before)
          local taken = math.min(units, held)
          for j, m in ipairs(members) do
            redis.call('ZREM', z, m)
            if j > 1 or taken < held then
              redis.call('ZADD', z, 0, p .. pad(block_of(p, m)) .. ':' .. fmt(sub(cum_of(p, m), taken)))
            end
          end
          l.c = sub(l.c, taken)
          local sets = {p .. 'c', fmt(l.c)}
          if taken == held and #members == 1 then
            -- The newest block emptied: the one before it (if it counts) is the newest now.
            local prev = pred and block_of(p, pred) or -1
            if prev < l.first then prev = -1 end
            l.newest = prev
            sets[#sets + 1] = p .. 'n'
            sets[#sets + 1] = fmt(prev >= 0 and prev or l.first - 1)
          end
          redis.call('HSET', h, unpack(sets))
          l.total = l.total - taken
        end
      end
    end
  end
  commit, asked = false, 1
end

-- Cost 0 is always admitted, even above a limit (a same-named limiter may be larger).
-- (Compared by subtraction: `total + asked` may pass 2^53, where doubles round.)
local allowed = true
for i = 1, n do
  local l = limits[i]
  if asked > 0 and asked > l.limit - l.total then allowed = false end
end

if not allowed then
  refused = commit
  -- (After a settle, `below` still holds: it only rewrote blocks that count.)
  -- The block by whose end `over` units have left: the oldest counting blocks leave first.
  for i = 1, n do
    local l = limits[i]
    local over = asked - (l.limit - l.total)
    if over > 0 and l.blocks > 1 then
      local p = l.p
      local lo = redis.call('ZLEXCOUNT', z, '-', '(' .. p .. pad(l.first))
      local hi = redis.call('ZLEXCOUNT', z, '-', '(' .. string.sub(p, 1, -2) .. ';') - 1
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if sub(cum_of(p, redis.call('ZRANGE', z, mid, mid)[1]), l.below) >= over then hi = mid else lo = mid + 1 end
      end
      l.freeing = block_of(p, redis.call('ZRANGE', z, lo, lo)[1])
    end
  end
end

local reply = {now, mismatch}
for i = 1, n do
  local l = limits[i]
  reply[#reply + 1] = l.total
  reply[#reply + 1] = l.newest
  reply[#reply + 1] = l.freeing
end

if allowed and commit and cost > 0 and not dry then
  local expire_at, new_h, new_z = 0, false, false
  -- The configuration's fingerprint, when it changes, goes with a fixed window's new block (one
  -- HSET), else on its own after the loop.
  local cfg_pending = mismatch == 1 or not cfg
  for i = 1, n do
    local l = limits[i]
    -- A clock that went back records into the newest block: counts never move back in time.
    local block = math.max(l.current, l.newest)
    if l.blocks == 1 then
      if block == l.n then
        redis.call('HINCRBY', h, l.p .. 'c', ARGV[3])
      else
        if cfg_pending then
          redis.call('HSET', h, l.p .. 'n', fmt(block), l.p .. 'c', ARGV[3], 'cfg', ARGV[4])
          cfg_pending = false
        else
          redis.call('HSET', h, l.p .. 'n', fmt(block), l.p .. 'c', ARGV[3])
        end
        new_h = true
      end
    else
      local p, c = l.p, l.c or 0
      local after = add(c, cost)
      -- Added before the old member goes, so that the key never empties (and keeps its TTL).
      redis.call('ZADD', z, 0, p .. pad(block) .. ':' .. fmt(after))
      if block == l.newest then
        -- (Nothing to remove only if the ZSET went away on its own, e.g. evicted: a new key.)
        if redis.call('ZREM', z, p .. pad(block) .. ':' .. fmt(c)) == 0 then new_z = true end
        redis.call('HSET', h, p .. 'c', fmt(after))
      else
        local sets = {p .. 'c', fmt(after), p .. 'n', fmt(block)}
        if not l.c then
          -- A new window: members left by an expired hash do not count.
          for _, v in ipairs({p .. 'f', '0', p .. 'l', fmt(l.first), p .. 'g', '1'}) do sets[#sets + 1] = v end
        end
        redis.call('HSET', h, unpack(sets))
        new_h, new_z = true, true
      end
    end
    local ends = (block + l.blocks) * l.precision
    if ends > expire_at then expire_at = ends end
  end
  if cfg_pending then redis.call('HSET', h, 'cfg', ARGV[4]) end
  -- The keys expire one second (of slack: see gcra.lua) after their newest block stops counting.
  -- The expiry only moves when a block is new, and only ever later: another configuration of
  -- this name may need the keys longer.
  if new_h or new_z then
    local ttl = math.ceil((expire_at - now) / 1000) + 1000 + CLOCK_SLACK_MS
    -- A hash with no `cfg` was empty: it has no expiry to compare with.
    if not cfg or redis.call('PTTL', h) < ttl then redis.call('PEXPIRE', h, fmt(ttl)) end
    if new_z and redis.call('PTTL', z) < ttl then redis.call('PEXPIRE', z, fmt(ttl)) end
  end
end
return reply
