-- Sets or extends a hold on one identity (see engine/hold.rs): a pause (Limiter::pause: a third
-- party said "stop") or a block (Limiter::block and the `block_for` option). Every engine's
-- script refuses checks and peeks while a hold key holds an instant after now (the hold check,
-- hold_check.lua). Each role has a key of its own, so that `resume` never ends a block and
-- `unblock` never ends a pause.
-- KEYS[1]  the hold key (the pause key `…:p:<key>` or the block key `…:bk:<key>`): the instant
--          (µs) the hold ends
-- ARGV[1]  'extend' (a hold already in effect that ends later is kept: a pause always; a block
--          after a refusal under `block_for`, so that a refusal never shortens an operator's
--          longer block, and a third party that said "come back in 60 s" is not overruled by a
--          later "3 s") or 'set' (a block by hand: it ends `duration` from now, whatever was
--          there)
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  the hold asked for, in microseconds (at least 1)
-- Returns {remaining µs of the hold in effect, now}.
-- The key lives exactly as long as the hold it holds (its TTL is the hold, rounded up to a
-- millisecond), so an idle held identity costs nothing afterwards.
local now = now_us(ARGV)
local hold = tonumber(ARGV[3])
local wanted = now + hold
if ARGV[1] == 'extend' then
  local current = tonumber(redis.call('GET', KEYS[1]) or '')
  if current and current >= wanted then return {current - now, now} end
end
redis.call('SET', KEYS[1], string.format('%d', wanted), 'PX', string.format('%d', math.ceil(hold / 1000) + CLOCK_SLACK_MS))
return {hold, now}
