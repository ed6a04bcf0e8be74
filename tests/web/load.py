"""Load from a Python process (the `ratekeeper` package): a token bucket checked every 20 ms
until killed, so the Limits page has a Python limiter whose numbers move."""

import sys
import time

import ratekeeper

backend = ratekeeper.Backend.redis(sys.argv[1])
uploads = backend.limiter("py-uploads", {"kind": "token_bucket", "rate": 5, "capacity": 10})
backend.flush()  # registered before the page looks
print("python load: running", flush=True)
while True:
    try:
        uploads.check("user-1")
    except (ratekeeper.Timeout, ratekeeper.BackendUnavailable) as e:
        # A loaded test machine can miss the 200 ms deadline: say so and go on.
        print(f"python load: {e!r} (transient)", file=sys.stderr, flush=True)
    time.sleep(0.02)
