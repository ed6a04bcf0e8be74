-- Adds one flush of a process's metric counts to a limiter's fleet metrics, once: a flush whose
-- reply was lost is sent again with the same sequence number, and applied only if it was not.
--
-- KEYS[1] the limiter's metrics hash; KEYS[2] the last sequence number applied for this writer
-- (one limiter object in one process).
-- ARGV: seq, metrics TTL (ms), sequence TTL (ms), then (field, delta) pairs.
local seq = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if seq <= last then
  return 0
end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], seq, 'PX', ARGV[3])
return 1
