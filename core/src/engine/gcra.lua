-- GCRA (virtual scheduling): token bucket, leaky bucket and points. The rule is
-- core/src/engine/gcra.rs; this script applies its writes, and the caller replays the rule on
-- what the script read to build the decision (so the decision is computed in one place).
-- KEYS[1]  the theoretical arrival time (TAT), in bucket_state.lua's format
-- ARGV[1]  'check' | 'peek' | 'adjust' | 'settle' (a settle is an adjust of the call's cost to
--          its actual cost; the wrapper makes it apply once per id)
-- ARGV[2]  now in microseconds, or '' to use the server's TIME
-- ARGV[3]  the spec and the actual cost, five MessagePack unsigned integers one after the other
--          (engine/packed.rs), read by one `cmsgpack.unpack`: nanoseconds per tick (1, 10, 100
--          or 1000; every figure below is in ticks), the emission interval T (ticks per unit),
--          tau = capacity * T, max_ahead (how far ahead of now the TAT may run: tau plus the
--          largest debt), and the actual cost (adjust, settle; 0 otherwise). One argument
--          decoded in C costs the server less than five read with tonumber (see the docs'
--          benchmarks page); a text format parsed in Lua costs more than the five.
-- ARGV[4]  cost (check) or estimate (adjust, settle): apart, so that check_all's dry run can
--          put the cost it decides at in its place (engine/script_all.rs)
-- ARGV[5]  settle: the instant the call was charged (µs); a refund gives back at most what of
--          the call's charge time has not yet refilled since then (see `Gcra::adjust`)
-- Returns {tat_us, tat_ns, now}: the TAT before this call (microseconds, and nanoseconds within
-- the microsecond) and the instant it was decided at. A refused check sets `refused`;
-- a dry check writes nothing (see wrapper.lua).
-- Written without local functions: a closure per call costs the server measurably. The bucket's
-- state is read and written by bucket_state.lua's sections (inlined where named: leased.lua
-- shares them); a settle's charge is `settle_charge` of the script's prelude, settle_charge.lua,
-- defined once per invocation.

local now = now_us(ARGV)
--@BUCKET_TAT@
local op = ARGV[1]
if op == 'peek' then return {tat_us, tat_ns, now} end

local tick, T, tau, max_ahead, actual = cmsgpack.unpack(ARGV[3])
local per = 1000 / tick
--@BUCKET_USED@

local new_used
if op == 'check' then
  local cost = tonumber(ARGV[4])
  -- Compared as `cost*T > tau - used`: the sum `used + cost*T` may exceed 2^53, where doubles
  -- round. Cost 0 is admitted and records nothing.
  if cost == 0 or cost * T > tau - used then
    refused = cost > 0
    return {tat_us, tat_ns, now}
  end
  -- Admitted: a `check_all` deciding before it writes (`dry`, see wrapper.lua) stops here.
  if dry then return {tat_us, tat_ns, now} end
  new_used = used + cost * T
else
  -- adjust or settle: charge the difference, possibly beyond capacity up to max_ahead (debt), or refund
  -- it (never beyond full).
  local estimate = tonumber(ARGV[4])
  if actual >= estimate then
    new_used = settle_charge(used, actual - estimate, T, max_ahead)
  else
    local back = (estimate - actual) * T
    if op == 'settle' then
      -- Ticks of the call's charge not yet refilled: its cost, less the time since it was charged
      -- (compared before subtracting: the product may exceed 2^53 where doubles round).
      local elapsed, charged = math.max(now - tonumber(ARGV[5]), 0) * per, estimate * T
      if elapsed >= charged then back = 0 else back = math.min(back, charged - elapsed) end
    end
    new_used = math.max(used - back, 0)
  end
  if new_used == used then return {tat_us, tat_ns, now} end
end

used = new_used
--@BUCKET_WRITE@
return {tat_us, tat_ns, now}
