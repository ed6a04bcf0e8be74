-- Sets or clears one live override and stamps the table with a new identity, atomically.
--
-- The identity lives in the overrides hash itself (fields that start with ':', which no limiter
-- name can), so the table and its identity are kept, lost and evicted together:
--   ':epoch'    the history's id, the server time (µs) when the table was first written after
--               it was missing: a restart without persistence, a FLUSHALL or an eviction starts a
--               new history, never a lower count in the old one;
--   ':version'  the count of writes in this history;
--   ':written'  the server time (µs) of this write: a replica promoted before it received the
--               last writes reaches the same count with another stamp.
-- Processes compare the three with what they hold and read the table when any differs.
--
-- KEYS[1] the overrides hash (field: name, or name:key); KEYS[2] the limiter's registry hash.
-- ARGV: 'set' or 'clear', the field, the canonical spec JSON, the spec's kind.
-- Returns {1, identity}, or {0, registered kind} when the registry knows the name with another
-- kind (an override applies only to limiters of its own kind).
if ARGV[1] == 'set' then
  local registered = redis.call('HGET', KEYS[2], 'kind')
  if registered and registered ~= ARGV[4] then
    return {0, registered}
  end
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('HSETNX', KEYS[1], ':epoch', now)
local version = redis.call('HINCRBY', KEYS[1], ':version', 1)
redis.call('HSET', KEYS[1], ':written', now)
local identity = redis.call('HMGET', KEYS[1], ':epoch', ':version', ':written')
return {1, identity[1] .. '/' .. identity[2] .. '/' .. identity[3]}
