"""Leased partitions from Python: every worker process runs this, and together they never exceed
100 writes per second (Azure's rate limiting pattern)."""

import os

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
cosmos = backend.partitions("cosmos", 100, 20, lease_ttl=15)  # 20 partitions of 5/s

written = 0
for record in range(40):
    cosmos.acquire()  # paced to the partitions this process holds
    written += 1
print("written:", written, "partitions held:", len(cosmos.partitions_held()))
cosmos.close()  # give them back at once
