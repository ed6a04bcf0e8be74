"""A fleet-wide limit at in-process speed: each process leases tokens from Redis in chunks."""

import os

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
# 100 sends per hour across every process; this one takes up to 10 tokens per round trip.
sends = backend.leased("sends", rate=100 / 3600, capacity=100, chunk=10, lease_ttl=1.0)

d = sends.check()  # one round trip: a lease of 10 tokens, one of them spent
print(f"allowed: {d.allowed}, left in this process's lease: {d.remaining}")
for _ in range(9):
    sends.check()  # no round trip: spent from the lease
print(f"the shared bucket: {sends.peek().remaining} left")
sends.check()  # the lease is used up: one more round trip, a new lease of 10
sends.close()  # its 9 unspent tokens go back
print(f"after close: {sends.peek().remaining} left")
