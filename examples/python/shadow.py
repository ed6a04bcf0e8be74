"""Roll a new limit out without refusing anyone: in shadow mode the limiter decides and counts
as usual, admits what it would refuse (marked `shadow_refused`), and a live override switches
enforcement on for every process, on exactly the state shadow mode reported."""

import os

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
spec = {"kind": "window", "limit": 3, "interval": 60}
search = backend.limiter("search", {**spec, "shadow": True})

decisions = [search.check("tenant-1") for _ in range(5)]
print(f"admitted: {sum(d.allowed for d in decisions)} of 5")
print(f"would have refused: {sum(d.shadow_refused for d in decisions)}")
last = decisions[-1]
print(f"the last one: remaining {last.remaining}, would retry in {last.retry_after:.0f}s")
print(f"counted: shadow_refused={search.metrics().shadow_refused}")

# Enforce from now on, in every process: an override replaces the whole spec, and this one
# does not say shadow. The state is the one shadow mode built: three calls in the window.
backend.set_limit("search", spec)
print(f"enforced: allowed {search.check('tenant-1').allowed}")
backend.clear_limit("search")
