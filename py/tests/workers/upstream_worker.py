"""One Python process of the fleet-pause test (test_upstream_fleet.py): loops `check` on the
shared Redis limiter and, only when admitted, sends one request to the partner server, then
`observe`s the response. Each request carries the Redis time of the check that admitted it; each
refusal for longer than the token bucket's own refill (a pause) is printed with its Redis time
and retry_after. Stops on 410 (the server has seen enough) or at the deadline."""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request

import ratekeeper

# The token bucket (100/s) never refuses for longer than 10 ms: a longer refusal is the pause.
PAUSE_LIKE_US = 100_000


def main() -> None:
    redis_url, prefix, server_url, name = sys.argv[1:5]
    deadline = time.monotonic() + 30  # a bound for a test that went wrong
    backend = ratekeeper.Backend.redis(redis_url, prefix=prefix, deadline=5.0, connect_timeout=5.0)
    partner = backend.token_bucket("partner", rate=100, capacity=10)
    while time.monotonic() < deadline:
        d = partner.check()
        if not d.allowed:
            if d.retry_after_us > PAUSE_LIKE_US:
                print("refused", d.decided_at_us, d.retry_after_us, flush=True)
            time.sleep(d.retry_after)
            continue
        request = urllib.request.Request(server_url, headers={"X-Worker": name, "X-Decided-At": str(d.decided_at_us)})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, headers = response.status, response.headers
        except urllib.error.HTTPError as e:
            status, headers = e.code, e.headers
        if status == 410:
            break
        partner.observe(status, headers.items())
    print("done", flush=True)


if __name__ == "__main__":
    main()
