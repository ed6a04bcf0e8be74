-- The one way a script reads "now" (µs): `now_us(ARGV)` returns the caller's instant in ARGV[2]
-- (a manual clock), or else the Redis server's TIME, so that client clocks never matter. Every
-- engine's `.lua` calls it.
--
-- The server's TIME is read once per invocation (`server_now`): every call of a batch, and a
-- settle and the peek or body it runs, decide at the instant the invocation began, as calls
-- that arrive together on a manual clock do. A `redis.call` is a large share of a short
-- check's server time, and every engine already decides calls of equal instants exactly
-- (a manual clock sends them): a log or a lease table keys its entries by count or id, never
-- by instant alone.
--
-- It also sets `CLOCK_SLACK_MS`, real time every TTL a script sets gets beyond its state's
-- lifetime by the clock it decides with: none on the server's own clock (its TTLs keep their
-- own second of slack); an hour on a caller's clock, whose time need not pass with real time,
-- so that a stall between two calls (a loaded machine, a paused process, a debugger) never
-- expires state that clock still holds live.

-- Lua 5.1 (Redis, Valkey, KeyDB) has `unpack`; Lua 5.4 (Dragonfly) only `table.unpack`. Read
-- through `table` first: Redis refuses a script that reads a global it does not define.
local unpack = table.unpack or unpack
local CLOCK_SLACK_MS = 0
local server_now
local function now_us(ARGV)
  if ARGV[2] ~= '' then
    CLOCK_SLACK_MS = 3600000
    return tonumber(ARGV[2])
  end
  CLOCK_SLACK_MS = 0
  if not server_now then
    local t = redis.call('TIME')
    server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server_now
end
