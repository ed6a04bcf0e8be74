import asyncio
import os

import ratekeeper

url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
backend = ratekeeper.Backend.redis(url)  # or ratekeeper.Backend() (memory)
api = backend.token_bucket("stripe", rate=10, capacity=20)  # 10/s, bursts of 20
d = api.check("user-42")  # never waits; a refusal consumes nothing
print("allowed:", d.allowed, "remaining:", d.remaining)
if not d.allowed:
    print(f"retry in {d.retry_after:.3f}s", d.headers())


def write_to_erp(fencing_token: int) -> None:
    print("fencing token > 0:", fencing_token > 0)


erp = backend.concurrent("erp", 50, lock_timeout=30)
with erp.within_limit("tenant-3") as permit:  # waits up to 5 s, releases on exit
    # Optional in the types: None when policy="ignore" skipped the block, or for rate limiters.
    assert permit.decision is not None and permit.decision.lease is not None
    write_to_erp(permit.decision.lease.fencing_token)


async def main() -> None:
    d = await api.acheck("user-42")  # asyncio-native, never blocks the loop
    print("async remaining:", d.remaining)
    async with erp.within_limit("tenant-3"):
        ...


asyncio.run(main())
