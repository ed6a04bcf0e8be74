-- Pauses one identity (see Limiter::pause): every engine's script refuses checks and peeks
-- while the pause key holds an instant after now (the pause check in script.rs).
-- KEYS[1]  the pause key: the instant (µs) the pause ends
-- ARGV[1]  'pause'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  the pause asked for, in microseconds (at least 1)
-- Returns {remaining µs of the pause in effect, now}.
-- A longer pause extends the one in effect; a shorter one leaves it as it is (a third party
-- that said "come back in 60 s" is not overruled by a later "3 s" from another response).
-- The key lives exactly as long as the pause it holds (its TTL is the pause, rounded up to a
-- millisecond), so an idle paused identity costs nothing afterwards.
local now = now_us(ARGV)
local pause = tonumber(ARGV[3])
local wanted = now + pause
local current = tonumber(redis.call('GET', KEYS[1]) or '')
if current and current >= wanted then return {current - now, now} end
redis.call('SET', KEYS[1], string.format('%d', wanted), 'PX', string.format('%d', math.ceil(pause / 1000) + CLOCK_SLACK_MS))
return {pause, now}
