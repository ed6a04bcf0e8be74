-- Sets or clears one live override and bumps the version every process polls, atomically.
--
-- KEYS[1] the overrides hash (field: name, or name:key); KEYS[2] the version counter; KEYS[3]
-- the limiter's registry hash.
-- ARGV: 'set' or 'clear', the field, the canonical spec JSON, the spec's kind.
-- Returns {1, version}, or {0, registered kind} when the registry knows the name with another
-- kind (an override applies only to limiters of its own kind).
if ARGV[1] == 'set' then
  local registered = redis.call('HGET', KEYS[3], 'kind')
  if registered and registered ~= ARGV[4] then
    return {0, registered}
  end
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
return {1, redis.call('INCR', KEYS[2])}
