"""Several limits at once, all or nothing: a per-user token rate, a per-tenant daily quota and a
per-tenant concurrency cap, checked together so that a refusal by one wastes nothing of the
others. The limiters co-locate by tenant (the part of the key before the first ':'), so on a
Redis Cluster their keys share one slot and the check stays one atomic script."""

import os

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"), prefix="check-all-example")
per_user = backend.limiter("tokens", {"kind": "token_bucket", "rate": 100, "capacity": 2000, "colocate": "tenant"})
per_tenant = backend.limiter("quota", {"kind": "bucket", "limit": 5000, "interval": 86400, "colocate": "tenant"})
in_flight = backend.limiter("in-flight", {"kind": "concurrent", "limit": 4, "lock_timeout": 60, "colocate": "tenant"})
for limiter, key in ((per_user, "acme:alice"), (per_tenant, "acme"), (in_flight, "acme")):
    limiter.reset(key)

estimate = 1500  # prompt + max output tokens
combined = backend.check_all([(per_user, "acme:alice", estimate), (per_tenant, "acme", estimate), (in_flight, "acme", 1)])
print(f"allowed: {combined.allowed}, user tokens left: {combined.parts[0].remaining}")
try:
    pass  # call the model here
finally:
    combined.release()  # frees the concurrency slot

# A second request of the same size: the user's bucket has 500 left, so nothing is consumed.
again = backend.check_all([(per_user, "acme:alice", estimate), (per_tenant, "acme", estimate), (in_flight, "acme", 1)])
print(f"allowed: {again.allowed}, retry after {again.retry_after:.0f} s")
print(f"tenant quota left: {per_tenant.peek('acme').remaining}")
