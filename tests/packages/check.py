"""One real check against the Redis at $REDIS_URL through the installed wheel
(scripts/test-packages runs it in a fresh venv with no Rust toolchain reachable)."""

import os

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ["REDIS_URL"], prefix="packages-py")
limiter = backend.token_bucket("installed", rate=1, capacity=1)
first, second = limiter.check(), limiter.check()
print(f"python: allowed={first.allowed} then allowed={second.allowed} retry_after={second.retry_after:.3f}")
# A bucket of one: the first check is allowed, the second refused.
assert first.allowed and not second.allowed and second.retry_after > 0
# In the registry before the process ends: the installed CLI's `limits` lists it next.
backend.flush()
