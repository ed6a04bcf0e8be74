"""Charging what an LLM call really cost: check with the estimate, settle with the actual usage."""

import asyncio
import os

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
# One million tokens per tenant per calendar month, from the billing day (the 15th).
quota = backend.calendar("llm-quota", limit=1_000_000, period="month", anchor=15)

estimate = 1_200 + 4_000  # prompt tokens + max output tokens
d = quota.check("tenant-7", estimate)
print(f"checked {estimate}: {d.remaining} left this month")
used = 1_200 + 350  # what the response says it used
print(f"settled to {used}: {quota.settle(d, used).remaining} left")
print(f"settled again: {quota.settle(d, used).remaining} left")  # a retry applies nothing more


async def answer() -> None:
    d = await quota.acheck("tenant-7", estimate)
    after = await quota.asettle(d, 5_000)  # a long answer: 200 tokens fewer than estimated
    print(f"async: {after.remaining} left")


asyncio.run(answer())
