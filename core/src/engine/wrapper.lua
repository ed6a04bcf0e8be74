-- Every engine's script runs inside this wrapper (see engine/lua.rs), which makes it callable
-- two ways:
-- - one call: `EVALSHA sha <n> keys… args…`, exactly as the engine's `.lua` file documents;
-- - a batch of calls: `EVALSHA sha <all keys> keys… 'batch' <n> (<keys_i> <args_i>)… args…`,
--   or `… 'batch-same' <n> <keys> <args> args…` when every call has the same number of keys
--   and of arguments (one shape written once costs the server less), or `… 'batch-shared' <n>
--   <keys> <args> args` when every call also has the same arguments (the usual case: checks of
--   one limiter at one cost, told apart by their keys), written once for all; answered with one
--   reply per call. The calls run one after the other, each exactly as if alone, and each
--   call's error is its own: the others are still answered. They arrived together, so they
--   share one instant: the server's TIME is read once per invocation (now.lua).
-- The lines `--@NAME@` are replaced by the parts named (see engine/lua.rs). Every function the
-- script defines is a closure made at each invocation (about 0.1 server µs each): only those a
-- call can use are made.
--@PRELUDE@
local refused, dry = false, false
local function run(KEYS, ARGV)
--@HOLD_CHECK@
--@BODY@
end
local shared = ARGV[1] == 'batch-shared'
local same = shared or ARGV[1] == 'batch-same'
if ARGV[1] ~= 'settle' and ARGV[1] ~= 'batch' and not same then return run(KEYS, ARGV) end
-- Only a settle or a batch (whose calls may be settles) gets here: `settle` is made for them
-- alone, so that a check does not pay for a closure it never calls.
--@SETTLE_ONCE@
if ARGV[1] == 'settle' then return settle(KEYS, ARGV) end
local n = tonumber(ARGV[2])
local replies = {}
local key_count, arg_count = tonumber(ARGV[3]), tonumber(ARGV[4])
local k, a = 1, same and 5 or 2 * n + 3
for i = 1, n do
  if not same then key_count, arg_count = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i]) end
  local keys, args = {}, {}
  for j = 1, key_count do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, arg_count do args[j] = ARGV[a]; a = a + 1 end
  if shared then a = 5 end
  local ok, reply = pcall(args[1] == 'settle' and settle or run, keys, args)
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' and reply.err then
    replies[i] = reply
  else
    replies[i] = redis.error_reply(tostring(reply))
  end
end
return replies
