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
-- One name, one spec: each process records the fingerprint of the spec it uses
-- (`pspec:<process>` = "<fingerprint> <user>", `fp:<fingerprint>` = the spec), so the registry
-- can show every spec in use with its processes. A process of the same kind whose spec differs
-- from a live process's is told (it warns once and counts it); the entry keeps both.
--
-- KEYS[1] the sorted set of names (score: last seen, ms); KEYS[2] the overrides hash; KEYS[3..]
-- each limiter's registry hash.
-- ARGV: TTL (ms), user (language, version, host), process (host:pid), the most users kept per
-- limiter (the latest seen), then (name, kind, spec, spec fingerprint) for each hash in KEYS
-- order.
-- Returns {name, other spec, who uses it, ...} for every name a live process of the same kind
-- uses with another spec (the first such process).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local user, process = 'user:' .. ARGV[2], 'proc:' .. ARGV[3]
local conflicts = {}
for i = 3, #KEYS do
  local at = 5 + (i - 3) * 4
  local hash, name, kind, fp = KEYS[i], ARGV[at], ARGV[at + 1], ARGV[at + 3]
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
    redis.call('HSET', hash, 'kind', kind, 'spec', ARGV[at + 2], 'last_seen', now, user, now, process, now,
      'pspec:' .. ARGV[3], fp .. ' ' .. ARGV[2], 'fp:' .. fp, ARGV[at + 2])
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
    local live, specs, fps = {}, {}, {}
    for j = 1, #fields, 2 do
      local field, seen = fields[j], tonumber(fields[j + 1])
      local prefix = string.sub(field, 1, 5)
      if (prefix == 'proc:' and seen < now - 180000) or (prefix == 'user:' and seen < now - ttl) then
        redis.call('HDEL', hash, field)
      elseif prefix == 'user:' then
        table.insert(users, {field, seen})
      elseif prefix == 'proc:' then
        live[string.sub(field, 6)] = true
      elseif prefix == 'pspec' then
        specs[string.sub(field, 7)] = fields[j + 1]
      elseif string.sub(field, 1, 3) == 'fp:' then
        fps[string.sub(field, 4)] = true
      end
    end
    -- The specs of processes gone (or of another kind, dropped above) go with them; a spec no
    -- process uses any more goes too.
    local used, told = {}, false
    for p, value in pairs(specs) do
      local other_fp = string.match(value, '^(%S+)')
      if not live[p] then
        redis.call('HDEL', hash, 'pspec:' .. p)
      else
        used[other_fp] = true
        if other_fp ~= fp and p ~= ARGV[3] and not told then
          told = true
          table.insert(conflicts, name)
          table.insert(conflicts, redis.call('HGET', hash, 'fp:' .. other_fp) or '')
          table.insert(conflicts, string.sub(value, #other_fp + 2) .. ' (' .. p .. ')')
        end
      end
    end
    for f in pairs(fps) do
      if not used[f] and f ~= fp then
        redis.call('HDEL', hash, 'fp:' .. f)
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
