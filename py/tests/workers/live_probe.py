"""A Python process for the live-limits test (py/tests/test_live.py): the same steps as
live_probe.c. Usage: python live_probe.py URL PREFIX NAME SPEC TARGETS"""

import sys
import time

import ratekeeper

url, prefix, name, spec, targets = sys.argv[1:6]
backend = ratekeeper.Backend.redis(url, prefix=prefix, deadline=2.0)
limiter = backend.limiter(name, spec)
limiter.peek()
backend.flush()
print("ready", flush=True)
for target in map(int, targets.split(",")):
    give_up = time.monotonic() + 20
    limit = None
    while True:
        try:
            limit = limiter.peek().limit
        except ratekeeper.RatekeeperError:
            pass  # the server is restarting: the next peek reconnects
        if limit == target:
            break
        if time.monotonic() > give_up:
            sys.exit(f"limit still {limit}, not {target}")
        time.sleep(0.002)
    print(f"{time.time() * 1000:.1f}", flush=True)
