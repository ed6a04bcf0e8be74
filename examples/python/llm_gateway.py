"""An LLM gateway: every request passes a per-user token rate, a per-tenant monthly token quota
and a per-tenant concurrency cap, checked together with the estimated tokens (prompt + max
output) and settled with the real usage once the model has answered. An abusive API key is
blocked for an hour after going over its request rate. A new per-tenant hourly cap is being
rolled out in shadow mode: it counts what it would refuse and refuses nothing.

The model is simulated (a seeded generator), so the report is the same on every run
from an empty Redis."""

import os
from collections.abc import Callable
from dataclasses import dataclass

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"), prefix="llm-gateway")
# The three limits of a request share the tenant as the first part of their keys ("colocate":
# "tenant"), so on a Redis Cluster they live in one slot and check_all stays one atomic script.
tokens = backend.limiter("user-tokens", {"kind": "token_bucket", "rate": 1, "capacity": 12_000, "colocate": "tenant"})
quota = backend.limiter(
    "tenant-quota", {"kind": "calendar", "limit": 20_000, "period": "month", "anchor": 15, "colocate": "tenant"}
)
in_flight = backend.limiter("tenant-in-flight", {"kind": "concurrent", "limit": 2, "lock_timeout": 120, "colocate": "tenant"})
# Per API key: 20 requests a minute; a key that goes over is kept out for an hour, fleet-wide,
# and this process remembers the refusal (the deny cache): the blocked key's next requests are
# refused without a round trip to Redis.
requests = backend.limiter("key-requests", {"kind": "window", "limit": 20, "interval": 60, "block_for": 3600})
requests = requests.with_deny_cache(True)
# Being rolled out: at most 6 requests per tenant an hour. In shadow mode it decides and counts
# as if enforced but never refuses; once its shadow refusals look right, a live override
# without "shadow" enforces it in every process.
hourly = backend.limiter(
    "tenant-hourly", {"kind": "window", "limit": 6, "interval": 3600, "shadow": True, "colocate": "tenant"}
)

MAX_OUTPUT = 2_000


def seeded(seed: int) -> Callable[[int, int], int]:
    """The simulated model: a small seeded generator (mulberry32, as the Node example's), so
    every run, in either language, gets the same answers."""
    state = seed

    def between(low: int, high: int) -> int:
        nonlocal state
        state = (state + 0x6D2B79F5) & 0xFFFFFFFF
        t = state
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xFFFFFFFF
        t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF
        return low + ((t ^ (t >> 14)) * (high - low + 1) >> 32)

    return between


model = seeded(10)


@dataclass
class Report:
    admitted: int = 0
    refused_by_rate: int = 0
    refused_by_quota: int = 0
    refused_by_concurrency: int = 0
    refused_by_key: int = 0
    settled_back: int = 0


report = Report()


def serve(wave: list[tuple[str, str]]) -> None:
    """Serves requests that arrive together: each holds its tenant's concurrency slot until the
    whole wave has been answered."""
    admitted: list[ratekeeper.CombinedDecision] = []
    for tenant, user in wave:
        if not requests.check(f"{tenant}:{user}").allowed:
            report.refused_by_key += 1
            continue
        prompt = model(200, 1_200)
        estimate = prompt + MAX_OUTPUT
        combined = backend.check_all(
            [(tokens, f"{tenant}:{user}", estimate), (quota, tenant, estimate), (in_flight, tenant, 1), (hourly, tenant, 1)]
        )
        if not combined.allowed:
            rate, month, slots, _ = combined.parts
            if not slots.allowed:
                report.refused_by_concurrency += 1
            elif not month.allowed:
                report.refused_by_quota += 1
            else:
                report.refused_by_rate += 1
            continue
        report.admitted += 1
        used = prompt + model(100, MAX_OUTPUT)  # what the response says it used
        rate, month, _, _ = combined.parts
        tokens.settle(rate, used)
        quota.settle(month, used)
        report.settled_back += estimate - used
        admitted.append(combined)
    for combined in admitted:
        combined.release()  # frees the concurrency slots


for user in ["acme:alice", "acme:bob", "globex:mallory"]:
    tokens.reset(user)
    requests.reset(user)
for limiter, key in [(quota, "acme"), (quota, "globex"), (in_flight, "acme"), (in_flight, "globex"), (hourly, "acme"), (hourly, "globex")]:
    limiter.reset(key)

for _ in range(6):
    serve([("acme", "alice"), ("acme", "bob"), ("acme", "alice")])  # three at once: one over the cap
for _ in range(30):
    serve([("globex", "mallory")])  # a script hammering the gateway

print(f"admitted: {report.admitted}")
print(f"refused by the user's token rate: {report.refused_by_rate}")
print(f"refused by the tenant's monthly quota: {report.refused_by_quota}")
print(f"refused by the tenant's concurrency cap: {report.refused_by_concurrency}")
print(f"refused by the API key's block: {report.refused_by_key}")
print(f"tokens settled back: {report.settled_back}")
print(f"refused locally (deny cache): {requests.metrics().refused_locally}")
print(f"would be refused by the new hourly cap (shadow mode): {hourly.metrics().shadow_refused}")
print(f"quota left this month: acme {quota.peek('acme').remaining}, globex {quota.peek('globex').remaining}")
