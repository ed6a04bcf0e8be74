-- Leased partitions (Azure's rate limiting pattern). Mirrors core/src/partitions/lease.rs.
-- KEYS[1]  a HASH of leases: field = partition index, value = 'member expiry_us token'
-- KEYS[2]  the last fencing token granted (string)
-- KEYS[3]  a ZSET of the live members of the caller's class: member id, score = heartbeat expiry
-- ARGV[1]  'lease' | 'release'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  first partition index of the caller's pool (inclusive)
-- ARGV[4]  last partition index of the caller's pool (exclusive)
-- ARGV[5]  lease_ttl (µs)
-- ARGV[6]  member id (the caller process's limiter)
-- ARGV[7…] release only: the partitions to give back (none: every one the member holds, and the
--          member leaves)
-- lease returns {now_us, target, members, index_1, token_1, index_2, token_2, ...}: the
-- partitions the member holds after the call, each renewed until now + lease_ttl; release
-- returns {now_us, released}.
--
-- Fair share: with `size` partitions in the pool and `members` live members, a member holds at
-- most ceil(size / members), and only floor(size / members) while another live member holds
-- fewer than that (a newcomer): a holder renewing above its target gives the excess back, and a
-- member below its target takes free partitions (never held, released, or lapsed: expiry <= now).
-- A partition has one holder at a time: it is granted only when free, with a new fencing token.
-- A holder above its target gives the excess back itself, with 'release' after it has stopped
-- spending it, so that no partition is spent by two members in the same instant.

local leases, token_key, members_key = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]
local now = now_us(ARGV)
local lo, hi = tonumber(ARGV[3]), tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local me = ARGV[6]
local fmt = function(x) return string.format('%d', x) end
local function touch(key)
  -- One second of slack: see gcra.lua.
  redis.call('PEXPIRE', key, fmt(math.ceil(ttl / 1000) + 1000 + CLOCK_SLACK_MS))
end

-- Every live lease of the pool: index -> {member, expiry, token}.
local held = {}
local raw = redis.call('HGETALL', leases)
for i = 1, #raw, 2 do
  local index = tonumber(raw[i])
  if index >= lo and index < hi then
    local member, expiry, token = string.match(raw[i + 1], '^(%S+) (%d+) (%d+)$')
    held[index] = {member, tonumber(expiry), token}
  end
end

if op == 'release' then
  local released = 0
  local function give(index)
    local lease = held[index]
    if lease and lease[1] == me then
      redis.call('HDEL', leases, fmt(index))
      released = released + 1
    end
  end
  if #ARGV > 6 then
    for i = 7, #ARGV do give(tonumber(ARGV[i])) end
  else
    for index = lo, hi - 1 do give(index) end
    redis.call('ZREM', members_key, me)
  end
  return {now, released}
end

redis.call('ZREMRANGEBYSCORE', members_key, '-inf', fmt(now))
redis.call('ZADD', members_key, fmt(now + ttl), me)
touch(members_key)
local members = redis.call('ZCARD', members_key)
local size = hi - lo
local floor_share = math.floor(size / members)
local ceil_share = math.ceil(size / members)

-- Live holdings per member, mine in index order, and the free partitions.
local counts, mine, free = {}, {}, {}
for index = lo, hi - 1 do
  local lease = held[index]
  if lease and lease[2] > now then
    counts[lease[1]] = (counts[lease[1]] or 0) + 1
    if lease[1] == me then mine[#mine + 1] = index end
  else
    free[#free + 1] = index
  end
end
counts[me] = nil
-- Is another live member below the floor share? (A member holding nothing has no count.)
local starved = false
if floor_share > 0 then
  local seen = 0
  for _, count in pairs(counts) do
    seen = seen + 1
    if count < floor_share then starved = true end
  end
  if seen < members - 1 then starved = true end
end
local target = starved and floor_share or ceil_share

-- Renew what the member holds (an excess too: the member gives it back itself).
local reply = {now, target, members}
for _, index in ipairs(mine) do
  local lease = held[index]
  redis.call('HSET', leases, fmt(index), me .. ' ' .. fmt(now + ttl) .. ' ' .. lease[3])
  reply[#reply + 1] = index
  reply[#reply + 1] = tonumber(lease[3])
end
-- Take free partitions up to the target, each with a new fencing token (never lower than now,
-- so tokens keep increasing after the state expired).
local wanted = target - #mine
local last = tonumber(redis.call('GET', token_key) or '0')
for i = 1, math.min(wanted, #free) do
  local index = free[i]
  last = math.max(last + 1, now)
  redis.call('HSET', leases, fmt(index), me .. ' ' .. fmt(now + ttl) .. ' ' .. fmt(last))
  reply[#reply + 1] = index
  reply[#reply + 1] = last
end
redis.call('SET', token_key, fmt(last))
touch(leases)
touch(token_key)
return reply
