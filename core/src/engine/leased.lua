-- Leased token bucket: a process takes tokens from the shared GCRA bucket in chunks (leases)
-- and spends them in-process; unspent tokens come back exactly once, or lapse with the lease.
-- The rule is core/src/engine/leased.rs; the bucket's state is gcra.lua's, read and written by
-- the same sections of bucket_state.lua (inlined where named).
-- KEYS[1]  the theoretical arrival time (TAT), as in gcra.lua
-- KEYS[2]  the live leases: a hash lease id ->
--          '<granted>:<T>:<ns per tick>:<low, µs>:<lapses at, µs>', the price of the lease's
--          tokens kept with it and the least the bucket has held used since it was granted (see
--          the give-back below)
-- ARGV[1]  'check' (take) | 'peek' | 'return' | 'settle'
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  nanoseconds per tick; ARGV[4] T (ticks per token); ARGV[5] tau = capacity * T;
-- ARGV[6]  max_ahead; ARGV[7] capacity
-- ARGV[8]  cost: tokens the call needs now (0 for peek and return)
-- ARGV[9]  want: tokens the lease asks for in all (at least cost)
-- ARGV[10] the new lease's id (take; '0': a plain check, which keeps no lease)
-- ARGV[11] the id of a lease to give tokens back to ('0': none); ARGV[12] how many
-- ARGV[13] lease TTL in milliseconds
-- A settle (see `Leased` in core/src/engine/leased.rs) passes the call's cost in ARGV[8], its
-- actual cost in ARGV[9] and the instant its tokens were granted (µs) in ARGV[10]; ARGV[11]
-- and ARGV[12] are '0'.
-- Returns {allowed, capacity, remaining, retry_us, reset_us, now, granted}.
-- A give-back zeroes the lease's granted count (the entry stays, for a settle's refund to find
-- its low, until it lapses or until REFUND_ONLY_KEPT newer given-back entries are kept: every
-- grant reads the whole table, so it must grow with the holders, not with their renewals; a
-- holder renewing names its used-up lease too), so a second one (a retried call whose first
-- reply was lost) gives nothing back, and it never gives back more than the lease was granted, nor
-- more than the bucket would hold had those tokens never been taken: a bucket that has refilled
-- since the grant (its use fell to `low`) was refilled for them already. A
-- grant takes at most half of what is available (but always the cost), so that one process
-- never holds everything.

local now = now_us(ARGV)
local tick, T, tau, max_ahead = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local capacity, cost, want = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local lease_ms = tonumber(ARGV[13])
local per = 1000 / tick

--@BUCKET_TAT@
--@BUCKET_USED@
local before = used
local op = ARGV[1]

-- Given-back entries (nothing left to give, kept for settles' refunds) a grant keeps, the newest;
-- once twice as many are kept the oldest go, so pruning runs at one grant in REFUND_ONLY_KEPT
-- at most. A settle whose lease entry went refunds nothing: under-use, never over-use.
local REFUND_ONLY_KEPT = 64

-- Time the bucket's use fell by at this call through a give-back (µs, rounded up): every
-- other lease's `low` falls by as much, since its tokens' history now reads without them.
local refunded_us = 0
-- Brings every live lease's low up to date: down by what a give-back at this call refunded,
-- down to `floor_us` (the bucket's use at a grant at this instant) when `at_grant`; entries of
-- processes that died holding a lease are dropped once lapsed when the table holds more than 64,
-- and at a grant the oldest given-back entries beyond REFUND_ONLY_KEPT (see above).
local lows_done = false
local function remember_low(floor_us, at_grant)
  if not at_grant and refunded_us == 0 and redis.call('HLEN', KEYS[2]) <= 64 then return end
  lows_done = true
  local prune = redis.call('HLEN', KEYS[2]) > 64
  local all = redis.call('HGETALL', KEYS[2])
  local given_back = {}
  for i = 1, #all, 2 do
    local v = all[i + 1]
    local lapses = tonumber(string.match(v, ':(%d+)$'))
    if prune and lapses < now then
      redis.call('HDEL', KEYS[2], all[i])
    else
      if at_grant and string.sub(v, 1, 2) == '0:' then given_back[#given_back + 1] = {lapses, all[i]} end
      local head, low = string.match(v, '^(%d+:%d+:%d+):(%d+):%d+$')
      if head then
        local next_low = math.max(tonumber(low) - refunded_us, 0)
        if at_grant then next_low = math.min(next_low, floor_us) end
        if next_low ~= tonumber(low) then
          redis.call('HSET', KEYS[2], all[i], string.format('%s:%d:%d', head, next_low, lapses))
        end
      end
    end
  end
  if #given_back > 2 * REFUND_ONLY_KEPT then
    table.sort(given_back, function(a, b) return a[1] < b[1] end)
    local oldest = {}
    for j = 1, #given_back - REFUND_ONLY_KEPT do oldest[j] = given_back[j][2] end
    redis.call('HDEL', KEYS[2], unpack(oldest))
  end
end

if op ~= 'peek' and ARGV[11] ~= '0' then
  local held = redis.call('HGET', KEYS[2], ARGV[11])
  if held then
    local granted, lease_T, lease_tick, low = string.match(held, '^(%d+):(%d+):(%d+):(%d+):%d+$')
    if granted then
      -- Kept with nothing left to give back, so that a settle of a call spent from it still
      -- finds its low (the table's expiry and pruning end it).
      redis.call('HSET', KEYS[2], ARGV[11], (string.gsub(held, '^%d+', '0')))
    else
      redis.call('HDEL', KEYS[2], ARGV[11])
    end
    if not granted then
      -- Entries written before leases kept their low: '<granted>:<T>:<tick>:<lapses at>' and,
      -- before they kept their price, '<granted>:<lapses at>'. They lapse within a second or so
      -- of an upgrade and are given back as they were then.
      granted, lease_T, lease_tick = string.match(held, '^(%d+):(%d+):(%d+):')
      if not granted then granted, lease_T, lease_tick = string.match(held, '^(%d+)'), T, tick end
    end
    local back = math.min(tonumber(ARGV[12]), tonumber(granted))
    -- Priced as the lease was granted, not by this call's spec: after a live change of rate a
    -- give-back returns at most the time its tokens took (in this call's ticks, rounded down:
    -- never more than was taken), and at most the least the bucket held used since the grant:
    -- had the tokens never been taken, the bucket would have been that much emptier then, and
    -- no more than that now (it would have been full, and refilled no further, in between).
    local back_ticks = math.floor(back * tonumber(lease_T) * tonumber(lease_tick) / tick)
    if low then back_ticks = math.min(back_ticks, math.floor(tonumber(low) * per)) end
    back_ticks = math.min(back_ticks, used)
    used = used - back_ticks
    refunded_us = math.ceil(back_ticks / per)
  end
end

if op == 'settle' then
  local estimate, actual = tonumber(ARGV[8]), tonumber(ARGV[9])
  if actual >= estimate then
    -- A charge: debt on the shared bucket, up to max_ahead, as gcra.lua's settle.
    used = settle_charge(used, actual - estimate, T, max_ahead)
  else
    -- A refund: as a give-back of the lease the call's tokens were granted in (found by its
    -- grant instant, ARGV[10]), priced as that lease was granted and at most its low: the
    -- bucket gets back only what it would hold had those tokens never been taken. A lease
    -- Redis no longer holds refunds nothing.
    local at = tonumber(ARGV[10])
    local back_ticks
    local all = redis.call('HGETALL', KEYS[2])
    for i = 1, #all, 2 do
      local lease_T, lease_tick, low, lapses = string.match(all[i + 1], '^%d+:(%d+):(%d+):(%d+):(%d+)$')
      if lapses and tonumber(lapses) - lease_ms * 1000 == at then
        local ticks = math.floor((estimate - actual) * tonumber(lease_T) * tonumber(lease_tick) / tick)
        ticks = math.min(ticks, math.floor(tonumber(low) * per))
        back_ticks = math.min(back_ticks or ticks, ticks)
      end
    end
    if back_ticks then
      back_ticks = math.min(back_ticks, used)
      used = used - back_ticks
      refunded_us = math.ceil(back_ticks / per)
    end
  end
end

local allowed, retry_us, granted = 1, 0, 0
if op == 'check' or op == 'peek' or op == 'settle' then
  local need = cost
  if op ~= 'check' then need = 1 end
  if need * T > tau - used then
    allowed = 0
    retry_us = math.ceil((need * T - (tau - used)) / per)
  elseif op == 'check' then
    local available = math.floor((tau - used) / T)
    granted = math.min(available, math.max(cost, math.min(want, math.ceil(available / 2))))
    -- This instant, just before a grant, is where the bucket's use stops falling: each live
    -- lease's low keeps the least seen since it was granted.
    remember_low(math.floor(used / per), granted > 0)
    used = used + granted * T
    if ARGV[10] ~= '0' then
      redis.call('HSET', KEYS[2], ARGV[10],
        string.format('%d:%d:%d:%d:%d', granted, T, tick, math.floor(used / per), now + lease_ms * 1000))
      redis.call('PEXPIRE', KEYS[2], lease_ms + 1000 + CLOCK_SLACK_MS)
    end
  end
end
if refunded_us > 0 and not lows_done then remember_low(nil, false) end

if used ~= before then
--@BUCKET_WRITE@
end
local remaining = 0
if used < tau then remaining = math.floor((tau - used) / T) end
return {allowed, capacity, remaining, retry_us, math.ceil(used / per), now, granted}
