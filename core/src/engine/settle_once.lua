-- Settles apply once per id, written once here for every engine (see Limiter::settle and
-- engine/settle.rs). A settle passes three keys more than its engine's own, last in KEYS: the
-- pause and block keys (as a check does) and the identity's record of applied settles (a
-- sorted set: settle id -> the end of its settle window, µs), and as ARGV[3] and ARGV[4] its id
-- and the end of its window (`SETTLE_WINDOW` after its call was charged); they are taken off
-- before the engine's body runs. A settle at or past the end of its window is answered `{2}`
-- (refused: its id is no longer remembered, so a repeat could not be told apart). An id already
-- recorded makes the call a peek (the hold check applies to it), answered `{0, peek reply…}`;
-- otherwise the body settles, the id is recorded until the end of its window, whatever the
-- state's TTL (a repeat after the state rolled over must not apply again), and the answer is
-- `{1, settle reply…}`. The record holds at most the ids of the last window's settles.
local function settle(KEYS, ARGV)
  local record = table.remove(KEYS)
  local id = table.remove(ARGV, 3)
  local ends = tonumber(table.remove(ARGV, 3))
  local now = now_us(ARGV)
  redis.call('ZREMRANGEBYSCORE', record, '-inf', string.format('%d', now))
  local reply
  if redis.call('ZSCORE', record, id) then
    ARGV[1] = 'peek'
    reply = run(KEYS, ARGV)
    if type(reply) == 'table' and not reply.err then table.insert(reply, 1, 0) end
    return reply
  end
  if now >= ends then return {2} end
  table.remove(KEYS)
  table.remove(KEYS)
  reply = run(KEYS, ARGV)
  if type(reply) ~= 'table' or reply.err then return reply end
  redis.call('ZADD', record, string.format('%d', ends), id)
  local last = redis.call('ZRANGE', record, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', record, string.format('%d', math.ceil((tonumber(last[2]) - now) / 1000) + 1 + CLOCK_SLACK_MS))
  table.insert(reply, 1, 1)
  return reply
end
