-- The charge of a settle whose actual cost exceeds the call's estimate, shared by every engine
-- that keeps a bucket's use in ticks (gcra.lua, leased.lua): the difference is charged as debt,
-- possibly beyond capacity but never beyond `max_ahead` (how far ahead of now the bucket may
-- run). `used` and `max_ahead` are in ticks, `T` is ticks per unit, `units` is actual minus
-- estimate (>= 0). Returns the bucket's use after the charge. Only whole units that fit in the
-- room are compared, so a huge difference is never multiplied by T (beyond 2^53 doubles round).
-- Defined once per script invocation, outside the per-call body: a closure per call costs the
-- server measurably.
local function settle_charge(used, units, T, max_ahead)
  local room = max_ahead - used
  if room <= 0 then return used end
  if units > (room - math.fmod(room, T)) / T then return max_ahead end
  return used + units * T
end
