"""Keep an abuser out for a while: a refusal blocks the key for `block_for` seconds in every
process, and an operator can block or unblock a key by hand."""

import os

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
# 5 login attempts per minute per user; going over blocks the user for 15 minutes, fleet-wide.
logins = backend.limiter("logins", {"kind": "window", "limit": 5, "interval": 60, "block_for": 900})
logins.reset("mallory")  # a fresh start each run

for _ in range(5):
    logins.check("mallory")
refused = logins.check("mallory")  # the 6th attempt: refused, and the block starts
print(f"6th attempt allowed: {refused.allowed}, retry in {refused.retry_after:.0f}s")
print(f"blocked everywhere: {not logins.peek('mallory').allowed}")

# An operator lets mallory back in: the block ends, the limit itself still counts.
logins.unblock("mallory")
print(f"after unblock the window says: retry in {logins.peek('mallory').retry_after:.0f}s")

# By hand: keep a key out for an hour, whatever its limit says.
logins.block(3600, "eve")
print(f"eve: retry in {logins.check('eve').retry_after:.0f}s")
logins.unblock("eve")
