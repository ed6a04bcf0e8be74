"""A Python process of the leased-fleet test (py/tests/test_leased_fleet.py): builds the leased
limiter with `backend.leased`, prints "ready", waits for "go" on stdin, then for SECONDS spends
from it (odd calls `check`, even calls `acquire`, which paces: it sleeps exactly until the
shared bucket can admit) and prints one JSON line: admitted count and the wall-clock
instants (ms) just before its first call and just after its last."""

import json
import sys
import time

import ratekeeper

url, prefix, name, rate, capacity, chunk, ttl, seconds = sys.argv[1:9]
backend = ratekeeper.Backend.redis(url, prefix=prefix)
limiter = backend.leased(name, float(rate), int(capacity), chunk=int(chunk), lease_ttl=float(ttl))
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
admitted, calls = 0, 0
first = time.time() * 1000
deadline = time.monotonic() + float(seconds)
while time.monotonic() < deadline:
    calls += 1
    if calls % 2:
        admitted += limiter.check().allowed
    else:
        try:
            limiter.acquire(wait_timeout=0.05)
            admitted += 1
        except ratekeeper.OverLimit:
            pass
last = time.time() * 1000
limiter.close()
print(json.dumps({"admitted": admitted, "calls": calls, "first": first, "last": last}), flush=True)
