-- Blocks one identity (see Limiter::block and the `block_for` option): every engine's script
-- refuses checks and peeks while the block key holds an instant after now (the hold check in
-- script.rs), exactly as it does for a pause, but under a key of its own so that a `resume`
-- never ends a block and an `unblock` never ends a pause.
-- KEYS[1]  the block key: the instant (µs) the block ends
-- ARGV[1]  'set' (by hand: the block ends `duration` from now, whatever was there) or
--          'extend' (after a refusal under `block_for`: a block already in effect that ends
--          later is kept, so a refusal never shortens an operator's longer block)
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  the block asked for, in microseconds (at least 1)
-- Returns {remaining µs of the block in effect, now}.
-- The key lives exactly as long as the block it holds (its TTL is the block, rounded up to a
-- millisecond), so an idle blocked identity costs nothing afterwards.
local now = now_us(ARGV)
local block = tonumber(ARGV[3])
local wanted = now + block
if ARGV[1] == 'extend' then
  local current = tonumber(redis.call('GET', KEYS[1]) or '')
  if current and current >= wanted then return {current - now, now} end
end
redis.call('SET', KEYS[1], string.format('%d', wanted), 'PX', string.format('%d', math.ceil(block / 1000) + CLOCK_SLACK_MS))
return {block, now}
