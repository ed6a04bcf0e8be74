"""One of the processes of the over-admission test: checks the same limiters on one Redis as
fast as it can until a deadline, and prints the server time (µs) of every admission as JSON."""

from __future__ import annotations

import json
import sys
import time

import ratekeeper


def main() -> None:
    url, prefix, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    backend = ratekeeper.Backend.redis(url, prefix=prefix, deadline=5.0, connect_timeout=5.0)
    limiters = {
        "window": backend.window("shared-window", 20, 0.25),
        "bucket": backend.bucket("shared-bucket", 20, 0.25),
        "token_bucket": backend.token_bucket("shared-tb", 80, 10),
    }
    admitted: dict[str, list[int]] = {name: [] for name in limiters}
    calls = 0
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())  # every process starts at the same moment
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    while time.time() < deadline:
        for name, limiter in limiters.items():
            d = limiter.check("tenant")
            calls += 1
            if d.allowed:
                admitted[name].append(d.decided_at_us)
    print(json.dumps({"calls": calls, "admitted": admitted}), flush=True)


if __name__ == "__main__":
    main()
