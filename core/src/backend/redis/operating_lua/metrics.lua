-- Adds one flush of a process's metric counts to a limiter's fleet metrics, once: a flush whose
-- reply was lost is sent again with the same sequence number, and applied only if it was not.
-- Its allowed and refused counts also go to the current minute's slot of the history ring (by
-- the server's clock), which operators read as the last hour's chart.
--
-- KEYS[1] the limiter's metrics hash; KEYS[2] the last sequence numbers applied for one process:
-- a hash, one field per limiter object of this name in the process (one key per process, not
-- per object); KEYS[3] the history hash: a ring of `slots` slots, slot i being fields m<i> (the
-- minute it holds, in minutes since the epoch), a<i> and r<i>.
-- ARGV: seq, metrics TTL (ms), sequence TTL (ms), history TTL (ms), slots, allowed, refused, the
-- object's field in KEYS[2], the sequence TTL at exit (ms; '' while the process runs), then
-- (field, delta) pairs. At exit no batch of this object follows, so the process's hash goes
-- within that short TTL rather than a day; it is still there for a copy of the same batch sent
-- by the process's background flush at the same moment, which it refuses.
local seq = tonumber(ARGV[1])
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[8]) or '0')
if seq <= last then
  return 0
end
for i = 10, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[8], seq)
if ARGV[9] ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[9])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
local allowed, refused = tonumber(ARGV[6]), tonumber(ARGV[7])
if allowed > 0 or refused > 0 then
  local minute = math.floor(tonumber(redis.call('TIME')[1]) / 60)
  local slot = string.format('%d', minute % tonumber(ARGV[5]))
  local held = redis.call('HGET', KEYS[3], 'm' .. slot)
  if held ~= string.format('%d', minute) then
    -- The slot held a minute a full ring ago (or nothing): start it over.
    redis.call('HSET', KEYS[3], 'm' .. slot, string.format('%d', minute), 'a' .. slot, '0', 'r' .. slot, '0')
  end
  redis.call('HINCRBY', KEYS[3], 'a' .. slot, allowed)
  redis.call('HINCRBY', KEYS[3], 'r' .. slot, refused)
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return 1
