"""A settle is not an admission: with its Redis killed, a settle raises the backend's error
(``BackendUnavailable`` or ``Timeout``) under every failure policy, sync and asyncio, so that
the caller knows the correction did not apply and can retry it."""

from __future__ import annotations

import asyncio

import pytest

import ratekeeper

from .conftest import RedisServer, unique_prefix


@pytest.mark.parametrize("policy", ["fail_closed", "fail_open", "fallback"])
def test_a_settle_with_redis_killed_raises_under_every_failure_policy(policy: str) -> None:
    server = RedisServer()
    try:
        backend = ratekeeper.Backend.redis(server.url, prefix=unique_prefix(), failure_policy=policy, deadline=0.3)
        limiter = backend.token_bucket("tb", 0.001, 10)
        decision = limiter.check("k", 8)
        assert decision.allowed
    finally:
        server.stop()
    with pytest.raises((ratekeeper.BackendUnavailable, ratekeeper.Timeout)):
        limiter.settle(decision, 3)

    async def settle_async() -> None:
        await limiter.asettle(decision, 3)

    with pytest.raises((ratekeeper.BackendUnavailable, ratekeeper.Timeout)):
        asyncio.run(settle_async())
