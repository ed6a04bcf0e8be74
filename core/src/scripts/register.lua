-- Registers the limiters a process uses (each at most once a minute): kind, spec, who uses it,
-- which processes, first and last seen; all of it expires a TTL after its last registration.
--
-- One name has one kind. A process registering a name with another kind than the entry's,
-- while a process of the entry's kind is alive (registered in the last three minutes), does not
-- take the entry over: the entry records the conflict (`conflict`: the other kind and who uses
-- it; `conflict_seen`) for `limiters()`, `ratekeeper limits` and the page to show. Once the
-- entry's processes are gone, the new kind takes it (a kind changed by a deploy). A whole-limiter
-- override of another kind than the one registered is reported the same way: it waited for a
-- first user (or was written by hand) and does not apply to it.
--
-- KEYS[1] the sorted set of names (score: last seen, ms); KEYS[2] the overrides hash; KEYS[3..]
-- each limiter's registry hash.
-- ARGV: TTL (ms), user (language, version, host), process (host:pid), the most users kept per
-- limiter (the latest seen), then (name, kind, spec) for each hash in KEYS order.
-- Returns {name, registered kind, ...} for every name whose entry holds another kind.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local user, process = 'user:' .. ARGV[2], 'proc:' .. ARGV[3]
local conflicts = {}
for i = 3, #KEYS do
  local at = 5 + (i - 3) * 3
  local hash, name, kind = KEYS[i], ARGV[at], ARGV[at + 1]
  local registered = redis.call('HGET', hash, 'kind')
  local held = false
  if registered and registered ~= kind then
    local fields = redis.call('HGETALL', hash)
    for j = 1, #fields, 2 do
      if string.sub(fields[j], 1, 5) == 'proc:' and tonumber(fields[j + 1]) >= now - 180000 then
        held = true
      end
    end
  end
  if held then
    redis.call('HSET', hash, 'conflict', kind .. ' used by ' .. ARGV[2] .. ' (' .. ARGV[3] .. ')', 'conflict_seen', now)
    table.insert(conflicts, name)
    table.insert(conflicts, registered)
  else
    if registered and registered ~= kind then
      -- The old kind's processes are gone: its users and conflict go with it.
      local fields = redis.call('HGETALL', hash)
      for j = 1, #fields, 2 do
        local prefix = string.sub(fields[j], 1, 5)
        if prefix == 'proc:' or prefix == 'user:' then
          redis.call('HDEL', hash, fields[j])
        end
      end
      redis.call('HDEL', hash, 'conflict', 'conflict_seen')
    end
    redis.call('HSETNX', hash, 'first_seen', now)
    redis.call('HSET', hash, 'kind', kind, 'spec', ARGV[at + 2], 'last_seen', now, user, now, process, now)
    local override = redis.call('HGET', KEYS[2], name)
    if override then
      local ok, decoded = pcall(cjson.decode, override)
      if ok and type(decoded) == 'table' and decoded.kind and decoded.kind ~= kind then
        redis.call('HSET', hash, 'conflict', 'an override of kind ' .. tostring(decoded.kind) ..
          ' does not apply to this ' .. kind, 'conflict_seen', now)
      end
    end
    -- Processes silent for three minutes (they renew every minute) and users silent for the TTL
    -- are forgotten, so the hash stays as small as the fleet.
    -- Users beyond the latest `max_users` go too (pod churn names a new host each deploy).
    local fields = redis.call('HGETALL', hash)
    local users = {}
    for j = 1, #fields, 2 do
      local field, seen = fields[j], tonumber(fields[j + 1])
      local prefix = string.sub(field, 1, 5)
      if (prefix == 'proc:' and seen < now - 180000) or (prefix == 'user:' and seen < now - ttl) then
        redis.call('HDEL', hash, field)
      elseif prefix == 'user:' then
        table.insert(users, {field, seen})
      end
    end
    local max_users = tonumber(ARGV[4])
    if #users > max_users then
      table.sort(users, function(a, b) return a[2] > b[2] end)
      for j = max_users + 1, #users do
        redis.call('HDEL', hash, users[j][1])
      end
    end
    redis.call('PEXPIRE', hash, ttl)
    redis.call('ZADD', KEYS[1], now, name)
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return conflicts
